//! Hand-built pickle byte strings for each executed opcode and each refusal, plus property
//! tests that random and mutated input never panics.

use super::*;
use proptest::prelude::*;

/// Assembles pickle bytes opcode by opcode.
#[derive(Clone)]
pub(crate) struct P(pub Vec<u8>);

impl P {
    pub fn proto2() -> Self {
        P(vec![op::PROTO, 2])
    }
    pub fn op(mut self, byte: u8) -> Self {
        self.0.push(byte);
        self
    }
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }
    /// `BINUNICODE` (what protocol 2 writes for every str).
    pub fn s(self, text: &str) -> Self {
        self.op(op::BINUNICODE).raw(&(text.len() as u32).to_le_bytes()).raw(text.as_bytes())
    }
    pub fn int(self, v: i32) -> Self {
        self.op(op::BININT).raw(&v.to_le_bytes())
    }
    pub fn global(self, module: &str, name: &str) -> Self {
        self.op(op::GLOBAL).raw(module.as_bytes()).raw(b"\n").raw(name.as_bytes()).raw(b"\n")
    }
    pub fn ordered_dict(self) -> Self {
        self.global("collections", "OrderedDict").op(op::EMPTY_TUPLE).op(op::REDUCE)
    }
    /// `_rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())` as torch emits.
    pub fn tensor(self, storage_class: &str, key: &str, numel: i32, offset: i32, size: &[i32], stride: &[i32]) -> Self {
        let mut p = self
            .global("torch._utils", "_rebuild_tensor_v2")
            .op(op::MARK)
            .op(op::MARK)
            .s("storage")
            .global("torch", storage_class)
            .s(key)
            .s("cpu")
            .int(numel)
            .op(op::TUPLE)
            .op(op::BINPERSID)
            .int(offset)
            .op(op::MARK);
        for &d in size {
            p = p.int(d);
        }
        p = p.op(op::TUPLE).op(op::MARK);
        for &d in stride {
            p = p.int(d);
        }
        p.op(op::TUPLE).op(op::NEWFALSE).ordered_dict().op(op::TUPLE).op(op::REDUCE)
    }
    pub fn stop(self) -> Vec<u8> {
        self.op(op::STOP).0
    }
}

fn run(p: P) -> Result<Value, PickleError> {
    unpickle(&p.stop())
}

fn ok(p: P) -> Value {
    match run(p) {
        Ok(v) => v,
        Err(e) => panic!("expected success, got {e}"),
    }
}

fn err(p: P) -> PickleErrorKind {
    match run(p) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.kind,
    }
}

fn int_of(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected int, got {other:?}"),
    }
}

fn str_of(v: &Value) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        other => panic!("expected str, got {other:?}"),
    }
}

fn tuple_of(v: &Value) -> Vec<Value> {
    match v {
        Value::Tuple(t) => t.items.clone(),
        other => panic!("expected tuple, got {other:?}"),
    }
}

fn list_of(v: &Value) -> Vec<Value> {
    match v {
        Value::List(l) => l.items.borrow().clone(),
        other => panic!("expected list, got {other:?}"),
    }
}

fn dict_of(v: &Value) -> Vec<(DictKey, Value)> {
    match v {
        Value::Dict(d) => d.items.borrow().entries.clone(),
        other => panic!("expected dict, got {other:?}"),
    }
}

// ---------------------------------------------------------------- scalars

#[test]
fn binint_family() {
    assert_eq!(int_of(&ok(P::proto2().int(-7))), -7);
    assert_eq!(int_of(&ok(P::proto2().op(op::BININT1).raw(&[200]))), 200);
    assert_eq!(int_of(&ok(P::proto2().op(op::BININT2).raw(&0xbeefu16.to_le_bytes()))), 0xbeef);
}

#[test]
fn long1_and_long4_are_twos_complement() {
    let long1 = |bytes: &[u8]| int_of(&ok(P::proto2().op(op::LONG1).raw(&[bytes.len() as u8]).raw(bytes)));
    assert_eq!(long1(&[]), 0);
    assert_eq!(long1(&[0xff]), -1);
    assert_eq!(long1(&[0x00, 0x80]), -32768);
    assert_eq!(long1(&[0x00, 0x80, 0x00]), 32768);
    assert_eq!(long1(&5_000_000_000i64.to_le_bytes()[..5]), 5_000_000_000);
    // 9 bytes that still fit in i64 (sign-extension byte).
    let mut nine = (-3i64).to_le_bytes().to_vec();
    nine.push(0xff);
    assert_eq!(long1(&nine), -3);
    // torch's legacy magic number does not fit: kept as LargeInt, not an error.
    let magic = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
    assert!(matches!(ok(P::proto2().op(op::LONG1).raw(&[10]).raw(&magic)), Value::LargeInt));
    let v = ok(P::proto2().op(op::LONG4).raw(&2i32.to_le_bytes()).raw(&[0x34, 0x12]));
    assert_eq!(int_of(&v), 0x1234);
    assert!(matches!(err(P::proto2().op(op::LONG4).raw(&(-1i32).to_le_bytes())), PickleErrorKind::Malformed(_)));
}

#[test]
fn binfloat_is_big_endian() {
    match ok(P::proto2().op(op::BINFLOAT).raw(&1.5f64.to_be_bytes())) {
        Value::Float(f) => assert_eq!(f, 1.5),
        other => panic!("{other:?}"),
    }
}

#[test]
fn none_true_false() {
    assert!(matches!(ok(P::proto2().op(op::NONE)), Value::None));
    assert!(matches!(ok(P::proto2().op(op::NEWTRUE)), Value::Bool(true)));
    assert!(matches!(ok(P::proto2().op(op::NEWFALSE)), Value::Bool(false)));
}

#[test]
fn unicode_family() {
    assert_eq!(str_of(&ok(P::proto2().s("héllo"))), "héllo");
    assert_eq!(str_of(&ok(P::proto2().op(op::SHORT_BINUNICODE).raw(&[2]).raw(b"ab"))), "ab");
    assert_eq!(str_of(&ok(P::proto2().op(op::BINUNICODE8).raw(&3u64.to_le_bytes()).raw(b"xyz"))), "xyz");
    assert!(matches!(err(P::proto2().op(op::SHORT_BINUNICODE).raw(&[1, 0xff])), PickleErrorKind::Malformed(_)));
}

#[test]
fn bytes_family() {
    let bytes = |v: Value| match v {
        Value::Bytes(b) => b.to_vec(),
        other => panic!("{other:?}"),
    };
    assert_eq!(bytes(ok(P::proto2().op(op::SHORT_BINBYTES).raw(&[2, 1, 2]))), vec![1, 2]);
    assert_eq!(bytes(ok(P::proto2().op(op::BINBYTES).raw(&1u32.to_le_bytes()).raw(&[9]))), vec![9]);
    assert_eq!(bytes(ok(P::proto2().op(op::BINBYTES8).raw(&1u64.to_le_bytes()).raw(&[7]))), vec![7]);
    // Protocol 2 writes bytes as _codecs.encode(str, 'latin1').
    let v = ok(P::proto2().global("_codecs", "encode").s("\u{ff}A").s("latin1").op(op::TUPLE2).op(op::REDUCE));
    assert_eq!(bytes(v), vec![0xff, b'A']);
}

// ---------------------------------------------------------------- framing and stack

#[test]
fn proto_frame_stop() {
    // Protocol 4 with a FRAME header, as pickle.dumps(..., protocol=4) writes.
    let body = P(vec![]).op(op::BININT1).raw(&[3]).op(op::STOP).0;
    let mut data = vec![op::PROTO, 4, op::FRAME];
    data.extend_from_slice(&(body.len() as u64).to_le_bytes());
    data.extend_from_slice(&body);
    assert_eq!(int_of(&unpickle(&data).expect("frame")), 3);
    assert!(matches!(err(P(vec![op::PROTO, 6])), PickleErrorKind::Malformed(_)));
    // Missing STOP.
    assert_eq!(unpickle(&P::proto2().int(1).0).expect_err("no STOP").kind, PickleErrorKind::NoStop);
    // STOP on an empty stack.
    assert!(matches!(err(P::proto2()), PickleErrorKind::Malformed(_)));
}

#[test]
fn frame_longer_than_input_is_truncated() {
    let mut data = vec![op::PROTO, 4, op::FRAME];
    data.extend_from_slice(&u64::MAX.to_le_bytes());
    data.push(op::STOP);
    assert!(matches!(unpickle(&data).map_err(|e| e.kind), Err(PickleErrorKind::Truncated { .. })));
}

#[test]
fn mark_tuple_and_small_tuples() {
    let t = tuple_of(&ok(P::proto2().op(op::MARK).int(1).int(2).int(3).int(4).op(op::TUPLE)));
    assert_eq!(t.iter().map(int_of).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert!(tuple_of(&ok(P::proto2().op(op::EMPTY_TUPLE))).is_empty());
    for (opcode, n) in [(op::TUPLE1, 1), (op::TUPLE2, 2), (op::TUPLE3, 3)] {
        let mut p = P::proto2();
        for i in 0..n {
            p = p.int(i);
        }
        let t = tuple_of(&ok(p.op(opcode)));
        assert_eq!(t.iter().map(int_of).collect::<Vec<_>>(), (0..n as i64).collect::<Vec<_>>());
    }
    // TUPLE3 with two items: underflow, not a panic.
    assert!(matches!(err(P::proto2().int(1).int(2).op(op::TUPLE3)), PickleErrorKind::Malformed(_)));
    // TUPLE without MARK.
    assert!(matches!(err(P::proto2().int(1).op(op::TUPLE)), PickleErrorKind::Malformed(_)));
}

#[test]
fn pop_dup_pop_mark() {
    let t = tuple_of(&ok(P::proto2().int(1).op(op::DUP).op(op::TUPLE2)));
    assert_eq!(t.iter().map(int_of).collect::<Vec<_>>(), vec![1, 1]);
    assert_eq!(int_of(&ok(P::proto2().int(1).int(2).op(op::POP))), 1);
    assert_eq!(int_of(&ok(P::proto2().int(5).op(op::MARK).int(1).int(2).op(op::POP_MARK))), 5);
    // POP cannot reach below a MARK.
    assert!(matches!(err(P::proto2().int(5).op(op::MARK).op(op::POP)), PickleErrorKind::Malformed(_)));
}

#[test]
fn lists_append_appends() {
    let l = list_of(&ok(P::proto2().op(op::EMPTY_LIST).int(1).op(op::APPEND).op(op::MARK).int(2).int(3).op(op::APPENDS)));
    assert_eq!(l.iter().map(int_of).collect::<Vec<_>>(), vec![1, 2, 3]);
    let l = list_of(&ok(P::proto2().op(op::MARK).int(4).op(op::LIST)));
    assert_eq!(l.iter().map(int_of).collect::<Vec<_>>(), vec![4]);
    assert!(matches!(err(P::proto2().int(1).int(2).op(op::APPEND)), PickleErrorKind::Malformed(_)));
}

#[test]
fn sets_become_lists() {
    let l = list_of(&ok(P::proto2().op(op::EMPTY_SET).op(op::MARK).int(1).int(2).op(op::ADDITEMS)));
    assert_eq!(l.len(), 2);
    let l = list_of(&ok(P::proto2().op(op::MARK).int(9).op(op::FROZENSET)));
    assert_eq!(l.iter().map(int_of).collect::<Vec<_>>(), vec![9]);
    let l = list_of(&ok(P::proto2().global("__builtin__", "set").op(op::EMPTY_LIST).int(3).op(op::APPEND).op(op::TUPLE1).op(op::REDUCE)));
    assert_eq!(l.iter().map(int_of).collect::<Vec<_>>(), vec![3]);
}

#[test]
fn dicts_setitem_setitems_keep_order_and_replace() {
    let d = dict_of(&ok(P::proto2()
        .op(op::EMPTY_DICT)
        .s("b")
        .int(1)
        .op(op::SETITEM)
        .op(op::MARK)
        .s("a")
        .int(2)
        .int(7)
        .int(3)
        .s("b")
        .int(4)
        .op(op::SETITEMS)));
    let keys: Vec<String> = d.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(keys, vec!["b", "a", "7"]);
    assert_eq!(int_of(&d[0].1), 4, "re-set key keeps its slot, takes the new value");
    let d = dict_of(&ok(P::proto2().op(op::MARK).s("k").int(1).op(op::DICT)));
    assert_eq!(d.len(), 1);
    assert!(matches!(err(P::proto2().op(op::EMPTY_DICT).op(op::MARK).s("k").op(op::SETITEMS)), PickleErrorKind::Malformed(_)));
    // A float key is refused (torch never writes one).
    assert!(matches!(
        err(P::proto2().op(op::EMPTY_DICT).op(op::BINFLOAT).raw(&1.0f64.to_be_bytes()).int(1).op(op::SETITEM)),
        PickleErrorKind::Malformed(_)
    ));
}

#[test]
fn memo_put_get_memoize() {
    let t = tuple_of(&ok(P::proto2().s("x").op(op::BINPUT).raw(&[3]).op(op::BINGET).raw(&[3]).op(op::TUPLE2)));
    assert_eq!(t.iter().map(str_of).collect::<Vec<_>>(), vec!["x", "x"]);
    let t = tuple_of(&ok(P::proto2()
        .int(11)
        .op(op::LONG_BINPUT)
        .raw(&70000u32.to_le_bytes())
        .op(op::LONG_BINGET)
        .raw(&70000u32.to_le_bytes())
        .op(op::TUPLE2)));
    assert_eq!(t.iter().map(int_of).collect::<Vec<_>>(), vec![11, 11]);
    // MEMOIZE uses the memo length as the index.
    let t = tuple_of(&ok(P::proto2()
        .int(1)
        .op(op::MEMOIZE)
        .op(op::POP)
        .int(2)
        .op(op::MEMOIZE)
        .op(op::POP)
        .op(op::BINGET)
        .raw(&[1])
        .op(op::BINGET)
        .raw(&[0])
        .op(op::TUPLE2)));
    assert_eq!(t.iter().map(int_of).collect::<Vec<_>>(), vec![2, 1]);
    assert!(matches!(err(P::proto2().op(op::BINGET).raw(&[9])), PickleErrorKind::Malformed(_)));
}

#[test]
fn memo_sharing_is_cheap() {
    // Doubling through the memo would be 2^n leaves if BINGET copied.
    let doubling = |times: usize| {
        let mut p = P::proto2().int(1).op(op::BINPUT).raw(&[0]);
        for _ in 0..times {
            p = p.op(op::BINGET).raw(&[0]).op(op::TUPLE2).op(op::BINPUT).raw(&[0]);
        }
        p
    };
    // 2^40 leaves as a tree, 41 values as a DAG: parses at once.
    match run(doubling(40)) {
        Ok(Value::Tuple(t)) => assert_eq!(t.depth, 40),
        _ => panic!("doubling(40) should parse to a tuple"),
    }
    let mut p = P::proto2().int(1).op(op::BINPUT).raw(&[0]);
    for _ in 0..100 {
        p = p.op(op::BINGET).raw(&[0]).op(op::TUPLE2).op(op::BINPUT).raw(&[0]);
    }
    // The nesting cap stops it at MAX_DEPTH, before anything large exists.
    assert_eq!(err(p), PickleErrorKind::TooDeep);
}

// ---------------------------------------------------------------- globals and calls

#[test]
fn global_and_stack_global_resolve_the_allow_list() {
    assert!(matches!(ok(P::proto2().global("torch._utils", "_rebuild_tensor_v2")), Value::Global(Global::RebuildTensorV2)));
    assert!(matches!(ok(P::proto2().s("collections").s("OrderedDict").op(op::STACK_GLOBAL)), Value::Global(Global::OrderedDict)));
    for (class, dtype) in [
        ("FloatStorage", DType::F32),
        ("HalfStorage", DType::F16),
        ("BFloat16Storage", DType::BF16),
        ("DoubleStorage", DType::F64),
        ("LongStorage", DType::I64),
        ("IntStorage", DType::I32),
        ("ShortStorage", DType::I16),
        ("CharStorage", DType::I8),
        ("ByteStorage", DType::U8),
        ("BoolStorage", DType::Bool),
    ] {
        assert!(matches!(
            ok(P::proto2().global("torch", class)),
            Value::Global(Global::Storage(StorageKind::Typed(d))) if d == dtype
        ));
    }
    assert!(matches!(ok(P::proto2().global("torch", "UntypedStorage")), Value::Global(Global::Storage(StorageKind::Untyped))));
}

fn assert_forbidden(kind: PickleErrorKind, module: &str, name: &str) {
    match kind {
        PickleErrorKind::ForbiddenGlobal { module: m, name: n } => {
            assert_eq!((m.as_str(), n.as_str()), (module, name));
            let message = PickleErrorKind::ForbiddenGlobal { module: m, name: n }.to_string();
            assert!(message.contains(&format!("{module}.{name}")), "{message}");
        }
        other => panic!("expected ForbiddenGlobal, got {other}"),
    }
}

#[test]
fn dangerous_globals_are_refused_by_name() {
    for (module, name) in [
        ("os", "system"),
        ("posix", "system"),
        ("nt", "system"),
        ("builtins", "eval"),
        ("builtins", "exec"),
        ("builtins", "getattr"),
        ("__builtin__", "eval"),
        ("subprocess", "Popen"),
        ("subprocess", "check_output"),
        ("torch", "load"),
        ("torch._utils", "_rebuild_device_tensor_from_numpy"),
        ("collections", "defaultdict"),
        ("numpy.core.multiarray", "_reconstruct"),
    ] {
        // As a GLOBAL opcode…
        assert_forbidden(err(P::proto2().global(module, name).s("touch /tmp/x").op(op::TUPLE1).op(op::REDUCE)), module, name);
        // …and as STACK_GLOBAL (protocol 4).
        assert_forbidden(err(P::proto2().s(module).s(name).op(op::STACK_GLOBAL)), module, name);
    }
}

#[test]
fn forbidden_global_error_offset_points_at_the_opcode() {
    let prefix = P::proto2().op(op::EMPTY_DICT);
    let at = prefix.0.len();
    let e = unpickle(&prefix.global("os", "system").stop()).expect_err("refused");
    assert_eq!(e.offset, at);
    assert_eq!(e.forbidden_global(), Some(("os", "system")));
}

#[test]
fn forbidden_global_names_are_escaped_and_bounded() {
    let long = "x".repeat(10_000);
    let e = err(P::proto2().s(&long).s("a\u{1b}[31m").op(op::STACK_GLOBAL));
    let message = e.to_string();
    assert!(message.len() < 600, "{}", message.len());
    assert!(!message.contains('\u{1b}'));
}

#[test]
fn storage_class_cannot_be_called() {
    assert!(matches!(err(P::proto2().global("torch", "FloatStorage").op(op::EMPTY_TUPLE).op(op::REDUCE)), PickleErrorKind::BadCall { .. }));
}

#[test]
fn reduce_requires_a_global_and_a_tuple() {
    assert!(matches!(err(P::proto2().int(1).op(op::EMPTY_TUPLE).op(op::REDUCE)), PickleErrorKind::Malformed(_)));
    assert!(matches!(err(P::proto2().global("collections", "OrderedDict").int(1).op(op::REDUCE)), PickleErrorKind::BadCall { .. }));
    assert!(matches!(err(P::proto2().global("torch", "Size").int(1).op(op::TUPLE1).op(op::REDUCE)), PickleErrorKind::BadCall { .. }));
}

#[test]
fn ordered_dict_reduce_newobj_and_build() {
    let d = dict_of(&ok(P::proto2()
        .ordered_dict()
        .op(op::MARK)
        .s("w")
        .int(1)
        .op(op::SETITEMS)
        // state_dict()'s `_metadata` attribute arrives through BUILD and is dropped.
        .op(op::EMPTY_DICT)
        .s("_metadata")
        .op(op::EMPTY_DICT)
        .op(op::SETITEM)
        .op(op::BUILD)));
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].0.to_string(), "w");
    let d = dict_of(&ok(P::proto2().global("collections", "OrderedDict").op(op::EMPTY_TUPLE).op(op::NEWOBJ)));
    assert!(d.is_empty());
    assert!(matches!(err(P::proto2().global("torch", "Size").op(op::EMPTY_TUPLE).op(op::NEWOBJ)), PickleErrorKind::Malformed(_)));
    assert!(matches!(err(P::proto2().int(1).op(op::NONE).op(op::BUILD)), PickleErrorKind::Malformed(_)));
    // OrderedDict([(k, v)]) form.
    let d = dict_of(&ok(P::proto2()
        .global("collections", "OrderedDict")
        .op(op::EMPTY_LIST)
        .s("k")
        .int(5)
        .op(op::TUPLE2)
        .op(op::APPEND)
        .op(op::TUPLE1)
        .op(op::REDUCE)));
    assert_eq!(int_of(&d[0].1), 5);
}

#[test]
fn torch_size_is_a_tuple() {
    let t = tuple_of(&ok(P::proto2().global("torch", "Size").int(2).int(3).op(op::TUPLE2).op(op::TUPLE1).op(op::REDUCE)));
    assert_eq!(t.iter().map(int_of).collect::<Vec<_>>(), vec![2, 3]);
}

// ---------------------------------------------------------------- tensors

fn tensor_of(v: &Value) -> TensorRef {
    match v {
        Value::Tensor(t) => (**t).clone(),
        other => panic!("expected tensor, got {other:?}"),
    }
}

#[test]
fn rebuild_tensor_v2_from_persistent_storage() {
    let t = tensor_of(&ok(P::proto2().tensor("HalfStorage", "7", 6, 1, &[3, 2], &[1, 3])));
    assert_eq!(t.storage.kind, StorageKind::Typed(DType::F16));
    assert_eq!(&*t.storage.key, "7");
    assert_eq!(t.storage.numel, 6);
    assert_eq!(t.storage_offset, 1);
    assert_eq!(t.shape, vec![3, 2]);
    assert_eq!(t.strides, vec![1, 3]);
}

#[test]
fn rebuild_tensor_v2_with_metadata_and_rebuild_parameter() {
    // Seven-argument form (metadata dict) wrapped in _rebuild_parameter, as full-module
    // pickles write nn.Parameter.
    let mut bytes = P::proto2().global("torch._utils", "_rebuild_parameter").tensor("FloatStorage", "0", 4, 0, &[4], &[1]).0;
    // Turn the tensor's 6-tuple into a 7-tuple: splice `{}` before its closing TUPLE.
    let close = bytes.len() - 2; // ... TUPLE REDUCE
    assert_eq!(&bytes[close..], &[op::TUPLE, op::REDUCE]);
    bytes.insert(close, op::EMPTY_DICT);
    let v = ok(P(bytes).op(op::NEWTRUE).ordered_dict().op(op::TUPLE3).op(op::REDUCE));
    let t = tensor_of(&v);
    assert_eq!(t.shape, vec![4]);
}

#[test]
fn rebuild_tensor_v2_rejects_bad_arguments() {
    // Negative size.
    assert!(matches!(err(P::proto2().tensor("FloatStorage", "0", 4, 0, &[-1], &[1])), PickleErrorKind::BadCall { .. }));
    // Rank mismatch.
    assert!(matches!(err(P::proto2().tensor("FloatStorage", "0", 4, 0, &[2, 2], &[1])), PickleErrorKind::BadCall { .. }));
    // Not a storage as first argument.
    assert!(matches!(
        err(P::proto2()
            .global("torch._utils", "_rebuild_tensor_v2")
            .op(op::MARK)
            .int(0)
            .int(0)
            .op(op::EMPTY_TUPLE)
            .op(op::EMPTY_TUPLE)
            .op(op::NEWFALSE)
            .op(op::NONE)
            .op(op::TUPLE)
            .op(op::REDUCE)),
        PickleErrorKind::BadCall { .. }
    ));
    // Too many dimensions.
    let dims = vec![1; MAX_RANK + 1];
    assert!(matches!(err(P::proto2().tensor("FloatStorage", "0", 1, 0, &dims, &dims)), PickleErrorKind::BadCall { .. }));
}

#[test]
fn persistent_ids_other_than_storage_are_refused() {
    assert!(matches!(err(P::proto2().s("storage").op(op::TUPLE1).op(op::BINPERSID)), PickleErrorKind::BadPersistentId(_)));
    assert!(matches!(err(P::proto2().int(3).op(op::BINPERSID)), PickleErrorKind::BadPersistentId(_)));
    // A forbidden class in the storage slot is refused when the GLOBAL is read.
    assert_forbidden(
        err(P::proto2().op(op::MARK).s("storage").global("os", "system").s("0").s("cpu").int(1).op(op::TUPLE).op(op::BINPERSID)),
        "os",
        "system",
    );
    // Negative numel.
    assert!(matches!(
        err(P::proto2().op(op::MARK).s("storage").global("torch", "FloatStorage").s("0").s("cpu").int(-1).op(op::TUPLE).op(op::BINPERSID)),
        PickleErrorKind::BadPersistentId(_)
    ));
}

// ---------------------------------------------------------------- refused opcodes, limits

#[test]
fn opcodes_outside_the_list_are_refused() {
    // INST/OBJ import classes; NEWOBJ_EX, EXT*, PERSID, text-protocol opcodes and
    // out-of-band buffers are never written by torch.save.
    for opcode in
        [b'i', b'o', 0x92, 0x82, 0x83, 0x84, b'P', b'I', b'L', b'S', b'T', b'U', b'V', b'F', b'p', b'g', 0x96, 0x97, 0x98, 0x00, 0xff]
    {
        match err(P::proto2().op(opcode)) {
            PickleErrorKind::UnsupportedOpcode(o) => assert_eq!(o, opcode),
            other => panic!("opcode 0x{opcode:02x}: {other}"),
        }
    }
}

#[test]
fn lengths_past_the_end_are_truncation_errors() {
    for p in [
        P::proto2().op(op::BINUNICODE).raw(&u32::MAX.to_le_bytes()),
        P::proto2().op(op::BINUNICODE8).raw(&u64::MAX.to_le_bytes()),
        P::proto2().op(op::BINBYTES8).raw(&(1u64 << 40).to_le_bytes()),
        P::proto2().op(op::LONG4).raw(&i32::MAX.to_le_bytes()),
        P::proto2().op(op::SHORT_BINBYTES).raw(&[200]),
    ] {
        assert!(matches!(unpickle(&p.0).map_err(|e| e.kind), Err(PickleErrorKind::Truncated { .. })));
    }
    // GLOBAL without a newline.
    assert!(matches!(unpickle(&P::proto2().op(op::GLOBAL).raw(b"os").0).map_err(|e| e.kind), Err(PickleErrorKind::Truncated { .. })));
}

#[test]
fn every_truncation_of_a_tensor_pickle_is_an_error() {
    let full = P::proto2().op(op::EMPTY_DICT).s("w").tensor("FloatStorage", "0", 6, 0, &[2, 3], &[3, 1]).op(op::SETITEM).stop();
    assert!(unpickle(&full).is_ok());
    for cut in 0..full.len() {
        assert!(unpickle(&full[..cut]).is_err(), "prefix of {cut} bytes");
    }
}

#[test]
fn deep_nesting_is_refused_and_does_not_overflow_the_stack() {
    // 100 000 nested lists: EMPTY_LIST ×N then APPEND ×(N-1).
    let n = 100_000;
    let mut p = P::proto2();
    for _ in 0..n {
        p = p.op(op::EMPTY_LIST);
    }
    for _ in 1..n {
        p = p.op(op::APPEND);
    }
    assert_eq!(err(p), PickleErrorKind::TooDeep);
    // Same through tuples.
    let mut p = P::proto2().op(op::EMPTY_TUPLE);
    for _ in 0..n {
        p = p.op(op::TUPLE1);
    }
    assert_eq!(err(p), PickleErrorKind::TooDeep);
}

#[test]
fn mutating_a_nested_container_is_refused() {
    // L = []; T = (L,); L.append(1)  — would make the depth bookkeeping stale.
    assert!(matches!(
        err(P::proto2().op(op::EMPTY_LIST).op(op::BINPUT).raw(&[0]).op(op::TUPLE1).op(op::BINGET).raw(&[0]).int(1).op(op::APPEND)),
        PickleErrorKind::Malformed(_)
    ));
}

// ---------------------------------------------------------------- properties

fn sample_state_dict() -> Vec<u8> {
    P::proto2()
        .op(op::EMPTY_DICT)
        .op(op::BINPUT)
        .raw(&[0])
        .op(op::MARK)
        .s("model")
        .ordered_dict()
        .op(op::MARK)
        .s("w")
        .tensor("FloatStorage", "0", 6, 0, &[2, 3], &[3, 1])
        .s("b")
        .tensor("BFloat16Storage", "1", 3, 0, &[3], &[1])
        .op(op::SETITEMS)
        .s("step")
        .op(op::LONG1)
        .raw(&[3, 0x10, 0x27, 0x13])
        .op(op::SETITEMS)
        .stop()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = unpickle(&data);
    }

    #[test]
    fn random_opcode_soup_never_panics(
        ops in proptest::collection::vec(
            prop_oneof![
                Just(op::MARK), Just(op::TUPLE), Just(op::TUPLE1), Just(op::TUPLE2),
                Just(op::EMPTY_LIST), Just(op::EMPTY_DICT), Just(op::APPEND), Just(op::APPENDS),
                Just(op::SETITEM), Just(op::SETITEMS), Just(op::DUP), Just(op::POP),
                Just(op::NONE), Just(op::NEWTRUE), Just(op::REDUCE), Just(op::BUILD),
                Just(op::BINPERSID), Just(op::MEMOIZE), Just(op::STOP), Just(op::EMPTY_TUPLE),
                Just(op::NEWOBJ), Just(op::POP_MARK), Just(op::FROZENSET), Just(op::ADDITEMS),
            ],
            0..200,
        ),
        seed in any::<u8>(),
    ) {
        let mut data = P::proto2().ordered_dict().global("torch", "FloatStorage").0;
        data.push(op::BININT1);
        data.push(seed);
        data.extend(ops);
        let _ = unpickle(&data);
    }

    #[test]
    fn mutated_state_dict_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut data = sample_state_dict();
        for (at, byte) in edits {
            let i = at.index(data.len());
            data[i] = byte;
        }
        let end = cut.index(data.len() + 1);
        let _ = unpickle(&data[..end]);
    }
}

#[test]
fn sample_state_dict_parses() {
    let root = unpickle(&sample_state_dict()).expect("valid");
    let d = dict_of(&root);
    assert_eq!(d[0].0.to_string(), "model");
    assert_eq!(int_of(&d[1].1), 0x132710);
    let model = dict_of(&d[0].1);
    assert_eq!(tensor_of(&model[1].1).storage.kind, StorageKind::Typed(DType::BF16));
}
