//! An allow-list unpickler for the `data.pkl` record of a PyTorch zip checkpoint.
//!
//! Python's pickle format is a small stack machine whose `GLOBAL`/`REDUCE` opcodes import and
//! call arbitrary Python callables; that is how a malicious checkpoint runs code on load.
//! This machine never imports or calls anything: it recognises a fixed set of globals (tensor
//! rebuild functions, storage classes and container constructors) and models their effect as
//! data. Any other global is refused the moment its name is read, before it reaches the
//! stack, so nothing about it is ever honoured.
//!
//! Resource bounds: every length read from the input is checked against the bytes that remain
//! before anything is sliced or allocated, container nesting is capped at [`MAX_DEPTH`] (which
//! also keeps the recursive drop of the value tree shallow), and values are reference-counted
//! so that `BINGET` of a large memoised object costs O(1) instead of a deep copy.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use crate::DType;

/// Deepest container nesting accepted. State dicts nest three or four levels; the cap keeps the
/// recursive drop and flatten of hostile inputs far away from the thread's stack limit.
pub(crate) const MAX_DEPTH: usize = 64;
/// Highest tensor rank accepted in `_rebuild_tensor_v2` (torch itself caps rank at 64 too).
pub(crate) const MAX_RANK: usize = 64;

/// Why a `data.pkl` record was refused, and at which byte of the record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at byte {offset}: {kind}")]
pub struct PickleError {
    /// Byte offset of the offending opcode inside `data.pkl`.
    pub offset: usize,
    /// What went wrong.
    pub kind: PickleErrorKind,
}

impl PickleError {
    /// The `(module, name)` of a refused global, if that is why the record was rejected.
    pub fn forbidden_global(&self) -> Option<(&str, &str)> {
        match &self.kind {
            PickleErrorKind::ForbiddenGlobal { module, name } => Some((module, name)),
            _ => None,
        }
    }
}

/// The kinds of [`PickleError`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(missing_docs)] // variant docs describe the fields
pub enum PickleErrorKind {
    /// The record ends in the middle of an opcode or its argument.
    Truncated { needed: u64, remaining: usize },
    /// An opcode outside the allow-list (including every opcode that imports by other means).
    UnsupportedOpcode(u8),
    /// A `GLOBAL`/`STACK_GLOBAL` naming anything but the allowed tensor/container globals.
    ForbiddenGlobal { module: String, name: String },
    /// An allowed global used in a way that would not be a pure data construction.
    BadCall { callee: &'static str, detail: String },
    /// Malformed structure: wrong operand types, missing `MARK`, empty stack, bad memo index.
    Malformed(String),
    /// Nesting deeper than 64 levels (`MAX_DEPTH`): a hostile file could otherwise exhaust the stack.
    TooDeep,
    /// A persistent id other than `('storage', <StorageClass>, key, location, numel)`.
    BadPersistentId(String),
    /// The record ended without `STOP`.
    NoStop,
}

impl fmt::Display for PickleErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, remaining } => write!(f, "truncated record: need {needed} more bytes, {remaining} remain"),
            Self::UnsupportedOpcode(op) => {
                write!(f, "opcode 0x{op:02x} ({}) is not allowed", opcode_name(*op))
            }
            Self::ForbiddenGlobal { module, name } => write!(
                f,
                "forbidden global `{module}.{name}`: only tensor rebuild functions, storage \
                 classes and container types are allowed; nothing was imported or called"
            ),
            Self::BadCall { callee, detail } => write!(f, "bad call to {callee}: {detail}"),
            Self::Malformed(detail) => write!(f, "malformed pickle: {detail}"),
            Self::TooDeep => write!(f, "containers nested deeper than {MAX_DEPTH} levels"),
            Self::BadPersistentId(detail) => write!(f, "unsupported persistent id: {detail}"),
            Self::NoStop => write!(f, "record ends without a STOP opcode"),
        }
    }
}

/// Storage classes named in persistent ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StorageKind {
    /// `torch.FloatStorage` and friends: the class fixes the element type.
    Typed(DType),
    /// `torch.UntypedStorage`: raw bytes; `numel` counts bytes.
    Untyped,
}

/// The globals this unpickler understands. Everything else is refused by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Global {
    RebuildTensorV2,
    RebuildParameter,
    RebuildParameterWithState,
    OrderedDict,
    Set,
    FrozenSet,
    TorchSize,
    CodecsEncode,
    Storage(StorageKind),
}

impl Global {
    fn resolve(module: &str, name: &str) -> Option<Self> {
        let global = match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2") => Self::RebuildTensorV2,
            ("torch._utils", "_rebuild_parameter") => Self::RebuildParameter,
            ("torch._utils", "_rebuild_parameter_with_state") => Self::RebuildParameterWithState,
            ("collections", "OrderedDict") => Self::OrderedDict,
            ("builtins" | "__builtin__", "set") => Self::Set,
            ("builtins" | "__builtin__", "frozenset") => Self::FrozenSet,
            ("torch", "Size") => Self::TorchSize,
            ("_codecs", "encode") => Self::CodecsEncode,
            ("torch", "UntypedStorage") => Self::Storage(StorageKind::Untyped),
            ("torch", storage) => Self::Storage(StorageKind::Typed(match storage {
                "FloatStorage" => DType::F32,
                "HalfStorage" => DType::F16,
                "BFloat16Storage" => DType::BF16,
                "DoubleStorage" => DType::F64,
                "LongStorage" => DType::I64,
                "IntStorage" => DType::I32,
                "ShortStorage" => DType::I16,
                "CharStorage" => DType::I8,
                "ByteStorage" => DType::U8,
                "BoolStorage" => DType::Bool,
                _ => return None,
            })),
            _ => return None,
        };
        Some(global)
    }

    fn label(self) -> &'static str {
        match self {
            Self::RebuildTensorV2 => "torch._utils._rebuild_tensor_v2",
            Self::RebuildParameter => "torch._utils._rebuild_parameter",
            Self::RebuildParameterWithState => "torch._utils._rebuild_parameter_with_state",
            Self::OrderedDict => "collections.OrderedDict",
            Self::Set => "builtins.set",
            Self::FrozenSet => "builtins.frozenset",
            Self::TorchSize => "torch.Size",
            Self::CodecsEncode => "_codecs.encode",
            Self::Storage(_) => "a torch storage class",
        }
    }
}

/// A storage referenced by a persistent id; its bytes live in `<prefix>/data/<key>`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StorageRef {
    pub kind: StorageKind,
    pub key: Rc<str>,
    /// Elements for typed storages, bytes for untyped ones.
    pub numel: u64,
}

/// A tensor view as `_rebuild_tensor_v2` describes it; offsets and strides are in elements.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TensorRef {
    pub storage: Rc<StorageRef>,
    pub storage_offset: u64,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

/// A mutable container (list or dict) plus the bookkeeping that bounds nesting.
///
/// `depth` is exact only while the container has not been nested into another one, so a
/// container may not be mutated once `nested` is set; the pickler never does that for the
/// objects a checkpoint contains.
#[derive(Debug)]
pub(crate) struct Container<T> {
    depth: Cell<usize>,
    nested: Cell<bool>,
    pub items: RefCell<T>,
}

impl<T> Container<T> {
    fn new(items: T) -> Rc<Self> {
        Rc::new(Self { depth: Cell::new(1), nested: Cell::new(false), items: RefCell::new(items) })
    }
}

/// Dict keys are restricted to hashable scalars; that is all torch writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum DictKey {
    Str(Rc<str>),
    Int(i64),
    Bool(bool),
    None,
}

impl fmt::Display for DictKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Str(s) => f.write_str(s),
            Self::Int(i) => write!(f, "{i}"),
            Self::Bool(true) => f.write_str("True"),
            Self::Bool(false) => f.write_str("False"),
            Self::None => f.write_str("None"),
        }
    }
}

/// An insertion-ordered dict with O(1) key replacement.
#[derive(Debug, Default)]
pub(crate) struct Dict {
    pub entries: Vec<(DictKey, Value)>,
    index: HashMap<DictKey, usize>,
}

impl Dict {
    fn insert(&mut self, key: DictKey, value: Value) {
        match self.index.get(&key) {
            Some(&at) => {
                if let Some(slot) = self.entries.get_mut(at) {
                    slot.1 = value;
                }
            }
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }
}

/// An immutable tuple and its nesting depth.
#[derive(Debug)]
pub(crate) struct Tuple {
    depth: usize,
    pub items: Vec<Value>,
}

/// The values this machine can build. Cloning is O(1).
#[derive(Debug, Clone)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside i64; kept only so the structure parses (no checkpoint needs one).
    LargeInt,
    Float(f64),
    Str(Rc<str>),
    // The payload is only inspected by tests; checkpoints never need bytes leaves.
    #[allow(dead_code)]
    Bytes(Rc<[u8]>),
    List(Rc<Container<Vec<Value>>>),
    Dict(Rc<Container<Dict>>),
    Tuple(Rc<Tuple>),
    Global(Global),
    Storage(Rc<StorageRef>),
    Tensor(Rc<TensorRef>),
}

impl Value {
    fn depth(&self) -> usize {
        match self {
            Self::List(c) => c.depth.get(),
            Self::Dict(c) => c.depth.get(),
            Self::Tuple(t) => t.depth,
            _ => 0,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Bool(_) => "bool",
            Self::Int(_) | Self::LargeInt => "int",
            Self::Float(_) => "float",
            Self::Str(_) => "str",
            Self::Bytes(_) => "bytes",
            Self::List(_) => "list",
            Self::Dict(_) => "dict",
            Self::Tuple(_) => "tuple",
            Self::Global(_) => "global",
            Self::Storage(_) => "storage",
            Self::Tensor(_) => "tensor",
        }
    }

    /// Marks a container as nested inside another one, which freezes it (see [`Container`]).
    fn mark_nested(&self) {
        match self {
            Self::List(c) => c.nested.set(true),
            Self::Dict(c) => c.nested.set(true),
            _ => {}
        }
    }
}

/// Reads one pickle and returns its root value. Bytes after `STOP` are ignored, as Python does.
pub(crate) fn unpickle(data: &[u8]) -> Result<Value, PickleError> {
    Machine::new(data).run()
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being executed, for error messages.
    op_start: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

impl<'a> Machine<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0, op_start: 0, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new() }
    }

    fn err(&self, kind: PickleErrorKind) -> PickleError {
        PickleError { offset: self.op_start, kind }
    }

    fn malformed(&self, detail: impl Into<String>) -> PickleError {
        self.err(PickleErrorKind::Malformed(detail.into()))
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], PickleError> {
        let remaining = self.data.len().saturating_sub(self.pos);
        let Some(len) = usize::try_from(len).ok().filter(|&l| l <= remaining) else {
            return Err(self.err(PickleErrorKind::Truncated { needed: len, remaining }));
        };
        let bytes = self.data.get(self.pos..self.pos + len).ok_or_else(|| self.malformed("internal bounds error"))?;
        self.pos += len;
        Ok(bytes)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let bytes = self.take(N as u64)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take_array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(self.take_array()?))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(self.take_array()?))
    }

    /// A newline-terminated ASCII line (the `GLOBAL` operand), without the newline.
    fn line(&mut self) -> Result<&'a str, PickleError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let Some(len) = rest.iter().position(|&b| b == b'\n') else {
            return Err(self.err(PickleErrorKind::Truncated { needed: rest.len() as u64 + 1, remaining: rest.len() }));
        };
        let line = self.take(len as u64 + 1)?;
        let line = line.get(..len).unwrap_or_default();
        std::str::from_utf8(line).map_err(|_| self.malformed("GLOBAL operand is not UTF-8"))
    }

    fn text(&mut self, len: u64) -> Result<Value, PickleError> {
        let bytes = self.take(len)?;
        let text = std::str::from_utf8(bytes).map_err(|_| self.malformed("string is not UTF-8"))?;
        Ok(Value::Str(Rc::from(text)))
    }

    fn bytes(&mut self, len: u64) -> Result<Value, PickleError> {
        Ok(Value::Bytes(Rc::from(self.take(len)?)))
    }

    fn push(&mut self, value: Value) {
        self.stack.push(value);
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.malformed("stack underflow"))
    }

    fn top(&self) -> Result<&Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        self.stack.last().ok_or_else(|| self.malformed("stack underflow"))
    }

    /// Pops everything above the innermost `MARK`, and the mark itself.
    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| self.malformed("no MARK on the stack"))?;
        if mark > self.stack.len() {
            return Err(self.malformed("MARK above the stack top"));
        }
        Ok(self.stack.split_off(mark))
    }

    fn tuple(&self, items: Vec<Value>) -> Result<Value, PickleError> {
        let depth = items.iter().map(Value::depth).max().unwrap_or(0) + 1;
        if depth > MAX_DEPTH {
            return Err(self.err(PickleErrorKind::TooDeep));
        }
        items.iter().for_each(Value::mark_nested);
        Ok(Value::Tuple(Rc::new(Tuple { depth, items })))
    }

    /// Checks that `container` may still be mutated and that adding `items` keeps it shallow.
    fn grow<T>(&self, container: &Container<T>, items: &[Value]) -> Result<(), PickleError> {
        if container.nested.get() {
            return Err(self.malformed("mutation of a container after it was nested"));
        }
        let depth = items.iter().map(|v| v.depth() + 1).fold(container.depth.get(), usize::max);
        if depth > MAX_DEPTH {
            return Err(self.err(PickleErrorKind::TooDeep));
        }
        container.depth.set(depth);
        items.iter().for_each(Value::mark_nested);
        Ok(())
    }

    fn dict_key(&self, key: Value) -> Result<DictKey, PickleError> {
        match key {
            Value::Str(s) => Ok(DictKey::Str(s)),
            Value::Int(i) => Ok(DictKey::Int(i)),
            Value::Bool(b) => Ok(DictKey::Bool(b)),
            Value::None => Ok(DictKey::None),
            other => Err(self.malformed(format!("dict key of type {} is not supported", other.type_name()))),
        }
    }

    fn set_items(&self, dict: &Value, flat: Vec<Value>) -> Result<(), PickleError> {
        let Value::Dict(container) = dict else {
            return Err(self.malformed(format!("SETITEM(S) on a {}", dict.type_name())));
        };
        if !flat.len().is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of items"));
        }
        self.grow(container, &flat)?;
        let mut items = container.items.borrow_mut();
        let mut iter = flat.into_iter();
        while let (Some(key), Some(value)) = (iter.next(), iter.next()) {
            items.insert(self.dict_key(key)?, value);
        }
        Ok(())
    }

    fn append_items(&self, list: &Value, new: Vec<Value>) -> Result<(), PickleError> {
        let Value::List(container) = list else {
            return Err(self.malformed(format!("APPEND(S)/ADDITEMS on a {}", list.type_name())));
        };
        self.grow(container, &new)?;
        container.items.borrow_mut().extend(new);
        Ok(())
    }

    fn memo_get(&self, index: u32) -> Result<Value, PickleError> {
        self.memo.get(&index).cloned().ok_or_else(|| self.malformed(format!("memo index {index} was never stored")))
    }

    fn memo_put(&mut self, index: u32) -> Result<(), PickleError> {
        let value = self.top()?.clone();
        self.memo.insert(index, value);
        Ok(())
    }

    fn global(&self, module: &str, name: &str) -> Result<Value, PickleError> {
        Global::resolve(module, name)
            .map(Value::Global)
            .ok_or_else(|| self.err(PickleErrorKind::ForbiddenGlobal { module: printable(module), name: printable(name) }))
    }

    fn long(&self, bytes: &[u8]) -> Value {
        // Little-endian two's complement of arbitrary width.
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let fill = if negative { 0xff } else { 0x00 };
        if bytes.len() > 8 {
            let (low, high) = bytes.split_at(8);
            let sign_ok = low.last().is_some_and(|b| (b & 0x80 != 0) == negative);
            if !high.iter().all(|&b| b == fill) || !sign_ok {
                return Value::LargeInt;
            }
            return self.long(low);
        }
        let mut buf = [fill; 8];
        if let Some(dst) = buf.get_mut(..bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        Value::Int(i64::from_le_bytes(buf))
    }

    fn run(mut self) -> Result<Value, PickleError> {
        loop {
            self.op_start = self.pos;
            let Some(&op) = self.data.get(self.pos) else {
                return Err(self.err(PickleErrorKind::NoStop));
            };
            self.pos += 1;
            match op {
                op::PROTO => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(self.malformed(format!("unknown protocol {proto}")));
                    }
                }
                op::FRAME => {
                    let len = self.u64()?;
                    let remaining = self.data.len().saturating_sub(self.pos);
                    if len > remaining as u64 {
                        return Err(self.err(PickleErrorKind::Truncated { needed: len, remaining }));
                    }
                }
                op::STOP => return self.pop(),
                op::MARK => self.marks.push(self.stack.len()),
                op::POP => {
                    self.pop()?;
                }
                op::POP_MARK => {
                    self.pop_mark()?;
                }
                op::DUP => {
                    let top = self.top()?.clone();
                    self.push(top);
                }
                op::NONE => self.push(Value::None),
                op::NEWTRUE => self.push(Value::Bool(true)),
                op::NEWFALSE => self.push(Value::Bool(false)),
                op::BININT => {
                    let v = i32::from_le_bytes(self.take_array()?);
                    self.push(Value::Int(v.into()));
                }
                op::BININT1 => {
                    let v = self.u8()?;
                    self.push(Value::Int(v.into()));
                }
                op::BININT2 => {
                    let v = u16::from_le_bytes(self.take_array()?);
                    self.push(Value::Int(v.into()));
                }
                op::LONG1 => {
                    let len = self.u8()?;
                    let bytes = self.take(len.into())?;
                    let v = self.long(bytes);
                    self.push(v);
                }
                op::LONG4 => {
                    let len = i32::from_le_bytes(self.take_array()?);
                    let len = u64::try_from(len).map_err(|_| self.malformed("LONG4 with a negative length"))?;
                    let bytes = self.take(len)?;
                    let v = self.long(bytes);
                    self.push(v);
                }
                op::BINFLOAT => {
                    let v = f64::from_be_bytes(self.take_array()?);
                    self.push(Value::Float(v));
                }
                op::SHORT_BINUNICODE => {
                    let len = self.u8()?;
                    let v = self.text(len.into())?;
                    self.push(v);
                }
                op::BINUNICODE => {
                    let len = self.u32()?;
                    let v = self.text(len.into())?;
                    self.push(v);
                }
                op::BINUNICODE8 => {
                    let len = self.u64()?;
                    let v = self.text(len)?;
                    self.push(v);
                }
                op::SHORT_BINBYTES => {
                    let len = self.u8()?;
                    let v = self.bytes(len.into())?;
                    self.push(v);
                }
                op::BINBYTES => {
                    let len = self.u32()?;
                    let v = self.bytes(len.into())?;
                    self.push(v);
                }
                op::BINBYTES8 => {
                    let len = self.u64()?;
                    let v = self.bytes(len)?;
                    self.push(v);
                }
                op::EMPTY_TUPLE => self.push(self.tuple(Vec::new())?),
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(op - op::TUPLE1 + 1);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.malformed("stack underflow"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.tuple(items)?;
                    self.push(v);
                }
                op::TUPLE => {
                    let items = self.pop_mark()?;
                    let v = self.tuple(items)?;
                    self.push(v);
                }
                op::EMPTY_LIST => self.push(Value::List(Container::new(Vec::new()))),
                op::EMPTY_SET => self.push(Value::List(Container::new(Vec::new()))),
                op::EMPTY_DICT => self.push(Value::Dict(Container::new(Dict::default()))),
                op::LIST | op::FROZENSET => {
                    let items = self.pop_mark()?;
                    let list = Value::List(Container::new(Vec::new()));
                    self.append_items(&list, items)?;
                    self.push(list);
                }
                op::DICT => {
                    let items = self.pop_mark()?;
                    let dict = Value::Dict(Container::new(Dict::default()));
                    self.set_items(&dict, items)?;
                    self.push(dict);
                }
                op::APPEND => {
                    let item = self.pop()?;
                    let list = self.top()?.clone();
                    self.append_items(&list, vec![item])?;
                }
                op::APPENDS | op::ADDITEMS => {
                    let items = self.pop_mark()?;
                    let list = self.top()?.clone();
                    self.append_items(&list, items)?;
                }
                op::SETITEM => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let dict = self.top()?.clone();
                    self.set_items(&dict, vec![key, value])?;
                }
                op::SETITEMS => {
                    let items = self.pop_mark()?;
                    let dict = self.top()?.clone();
                    self.set_items(&dict, items)?;
                }
                op::BINPUT => {
                    let index = self.u8()?;
                    self.memo_put(index.into())?;
                }
                op::LONG_BINPUT => {
                    let index = self.u32()?;
                    self.memo_put(index)?;
                }
                op::MEMOIZE => {
                    let index = u32::try_from(self.memo.len()).map_err(|_| self.malformed("memo overflow"))?;
                    self.memo_put(index)?;
                }
                op::BINGET => {
                    let index = self.u8()?;
                    let v = self.memo_get(index.into())?;
                    self.push(v);
                }
                op::LONG_BINGET => {
                    let index = self.u32()?;
                    let v = self.memo_get(index)?;
                    self.push(v);
                }
                op::GLOBAL => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let v = self.global(module, name)?;
                    self.push(v);
                }
                op::STACK_GLOBAL => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Value::Str(module), Value::Str(name)) = (&module, &name) else {
                        return Err(self.malformed("STACK_GLOBAL operands are not strings"));
                    };
                    let v = self.global(module, name)?;
                    self.push(v);
                }
                op::REDUCE => {
                    let args = self.pop()?;
                    let callee = self.pop()?;
                    let v = self.reduce(callee, args)?;
                    self.push(v);
                }
                op::NEWOBJ => {
                    let args = self.pop()?;
                    let class = self.pop()?;
                    let v = self.new_object(class, args)?;
                    self.push(v);
                }
                op::BUILD => {
                    let _state = self.pop()?;
                    // Instance state (e.g. the `_metadata` attribute of a state_dict
                    // OrderedDict, or Python attributes of a tensor) is not part of the weights;
                    // it is dropped, never applied.
                    match self.top()? {
                        Value::Dict(_) | Value::Tensor(_) | Value::List(_) => {}
                        other => return Err(self.malformed(format!("BUILD on a {}", other.type_name()))),
                    }
                }
                op::BINPERSID => {
                    let pid = self.pop()?;
                    let v = self.persistent_load(pid)?;
                    self.push(v);
                }
                other => return Err(self.err(PickleErrorKind::UnsupportedOpcode(other))),
            }
        }
    }

    fn args<'v>(&self, callee: Global, args: &'v Value) -> Result<&'v [Value], PickleError> {
        match args {
            Value::Tuple(t) => Ok(&t.items),
            other => Err(self.bad_call(callee, format!("arguments are a {}, not a tuple", other.type_name()))),
        }
    }

    fn bad_call(&self, callee: Global, detail: impl Into<String>) -> PickleError {
        self.err(PickleErrorKind::BadCall { callee: callee.label(), detail: detail.into() })
    }

    /// Models the effect of calling an allowed global. Nothing is ever called.
    fn reduce(&self, callee: Value, args: Value) -> Result<Value, PickleError> {
        let Value::Global(callee) = callee else {
            return Err(self.malformed(format!("REDUCE on a {}", callee.type_name())));
        };
        let items = self.args(callee, &args)?;
        match callee {
            Global::RebuildTensorV2 => self.rebuild_tensor(items),
            Global::RebuildParameter | Global::RebuildParameterWithState => match items.first() {
                Some(Value::Tensor(t)) if items.len() >= 3 => Ok(Value::Tensor(t.clone())),
                _ => Err(self.bad_call(callee, "expected (tensor, requires_grad, hooks, ...)")),
            },
            Global::OrderedDict => {
                let dict = Value::Dict(Container::new(Dict::default()));
                match items {
                    [] => {}
                    [Value::List(pairs)] => {
                        let mut flat = Vec::new();
                        for pair in pairs.items.borrow().iter() {
                            match pair {
                                Value::Tuple(t) if t.items.len() == 2 => flat.extend(t.items.iter().cloned()),
                                _ => return Err(self.bad_call(callee, "items are not (key, value) pairs")),
                            }
                        }
                        self.set_items(&dict, flat)?;
                    }
                    _ => return Err(self.bad_call(callee, "expected () or ([pairs],)")),
                }
                Ok(dict)
            }
            Global::Set | Global::FrozenSet => {
                let list = Value::List(Container::new(Vec::new()));
                match items {
                    [] => {}
                    [Value::List(src)] => {
                        let src: Vec<Value> = src.items.borrow().clone();
                        self.append_items(&list, src)?;
                    }
                    _ => return Err(self.bad_call(callee, "expected () or ([items],)")),
                }
                Ok(list)
            }
            Global::TorchSize => match items {
                [Value::Tuple(t)] => Ok(Value::Tuple(t.clone())),
                _ => Err(self.bad_call(callee, "expected (tuple,)")),
            },
            Global::CodecsEncode => match items {
                [Value::Str(text), Value::Str(encoding)] if matches!(&**encoding, "latin1" | "latin-1" | "iso-8859-1") => {
                    let bytes = text
                        .chars()
                        .map(|c| u8::try_from(u32::from(c)))
                        .collect::<Result<Vec<u8>, _>>()
                        .map_err(|_| self.bad_call(callee, "character outside latin-1"))?;
                    Ok(Value::Bytes(Rc::from(bytes)))
                }
                _ => Err(self.bad_call(callee, "expected (str, 'latin1')")),
            },
            Global::Storage(_) => Err(self.bad_call(callee, "storage classes may only appear inside a persistent id")),
        }
    }

    fn new_object(&self, class: Value, args: Value) -> Result<Value, PickleError> {
        match class {
            Value::Global(Global::OrderedDict) => match &args {
                Value::Tuple(t) if t.items.is_empty() => Ok(Value::Dict(Container::new(Dict::default()))),
                _ => Err(self.bad_call(Global::OrderedDict, "NEWOBJ with arguments")),
            },
            other => Err(self.malformed(format!("NEWOBJ on a {}", other.type_name()))),
        }
    }

    fn index_tuple(&self, value: &Value, what: &str) -> Result<Vec<u64>, PickleError> {
        let Value::Tuple(t) = value else {
            return Err(self.bad_call(Global::RebuildTensorV2, format!("{what} is a {}, not a tuple", value.type_name())));
        };
        if t.items.len() > MAX_RANK {
            return Err(self.bad_call(Global::RebuildTensorV2, format!("{what} has {} dimensions (at most {MAX_RANK})", t.items.len())));
        }
        t.items
            .iter()
            .map(|v| match v {
                Value::Int(i) => {
                    u64::try_from(*i).map_err(|_| self.bad_call(Global::RebuildTensorV2, format!("negative {what} entry {i}")))
                }
                other => Err(self.bad_call(Global::RebuildTensorV2, format!("{what} entry is a {}", other.type_name()))),
            })
            .collect()
    }

    fn rebuild_tensor(&self, items: &[Value]) -> Result<Value, PickleError> {
        let callee = Global::RebuildTensorV2;
        let [storage, offset, size, stride, _requires_grad, _hooks, ..] = items else {
            return Err(self.bad_call(callee, format!("{} arguments, expected 6 or 7", items.len())));
        };
        if items.len() > 7 {
            return Err(self.bad_call(callee, format!("{} arguments, expected 6 or 7", items.len())));
        }
        let Value::Storage(storage) = storage else {
            return Err(self.bad_call(callee, format!("first argument is a {}, not a storage", storage.type_name())));
        };
        let storage_offset = match offset {
            Value::Int(i) => u64::try_from(*i).map_err(|_| self.bad_call(callee, format!("negative storage offset {i}")))?,
            other => return Err(self.bad_call(callee, format!("storage offset is a {}", other.type_name()))),
        };
        let shape = self.index_tuple(size, "size")?;
        let strides = self.index_tuple(stride, "stride")?;
        if shape.len() != strides.len() {
            return Err(self.bad_call(callee, format!("size has {} dims but stride has {}", shape.len(), strides.len())));
        }
        Ok(Value::Tensor(Rc::new(TensorRef { storage: storage.clone(), storage_offset, shape, strides })))
    }

    /// torch's `persistent_load`: `('storage', <StorageClass>, key, location, numel)`.
    fn persistent_load(&self, pid: Value) -> Result<Value, PickleError> {
        let bad = |detail: String| self.err(PickleErrorKind::BadPersistentId(detail));
        let Value::Tuple(t) = &pid else {
            return Err(bad(format!("a {}, not a tuple", pid.type_name())));
        };
        match t.items.as_slice() {
            [Value::Str(tag), Value::Global(Global::Storage(kind)), Value::Str(key), Value::Str(_location), Value::Int(numel)]
                if &**tag == "storage" =>
            {
                let numel = u64::try_from(*numel).map_err(|_| bad(format!("negative storage size {numel}")))?;
                Ok(Value::Storage(Rc::new(StorageRef { kind: *kind, key: key.clone(), numel })))
            }
            items => Err(bad(format!(
                "({}) instead of ('storage', <StorageClass>, key, location, numel)",
                items.iter().map(Value::type_name).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

/// A file-controlled name, shortened and escaped so that an error message stays one sane line.
fn printable(text: &str) -> String {
    const LIMIT: usize = 120;
    let mut out: String = text.chars().take(LIMIT).flat_map(char::escape_debug).collect();
    if text.chars().count() > LIMIT {
        out.push('…');
    }
    out
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        b'i' => "INST",
        b'o' => "OBJ",
        0x92 => "NEWOBJ_EX",
        0x82..=0x84 => "EXT",
        b'P' => "PERSID",
        b'I' => "INT",
        b'L' => "LONG",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'F' => "FLOAT",
        b'p' => "PUT",
        b'g' => "GET",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown",
    }
}

/// Opcode bytes of pickle protocols 0–5 that this machine executes.
pub(crate) mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BINFLOAT: u8 = b'G';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
}

#[cfg(test)]
pub(crate) mod tests;
