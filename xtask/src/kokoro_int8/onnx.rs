//! The part of ONNX's `onnx.proto` (IR version 3+) the int8 conversion reads, as prost messages.
//!
//! Field numbers and types are those of `onnx/onnx.proto` (`ModelProto.graph = 7`,
//! `GraphProto.node = 1`, `.initializer = 5`, `NodeProto.input = 1`, `.name = 3`, `.op_type = 4`,
//! `TensorProto.dims = 1`, `.data_type = 2`, `.float_data = 4`, `.int32_data = 5`,
//! `.int64_data = 7`, `.name = 8`, `.raw_data = 9`, `.data_location = 14`). prost skips every
//! field not declared here, so the rest of the schema (attributes, value infos, metadata) costs
//! nothing and needs no protoc at build time.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

/// `TensorProto.DataType` values the export uses.
pub const FLOAT: i32 = 1;
const UINT8: i32 = 2;
const INT8: i32 = 3;
const INT32: i32 = 6;
const INT64: i32 = 7;
/// `TensorProto.DataLocation.EXTERNAL`: data in a side file, which this single-file export lacks.
const EXTERNAL: i32 = 1;

/// A dense row-major array converted to f32, as numpy's `to_array(t).astype(np.float32)` gives
/// (exact for the int8/uint8/int32 values the export stores).
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Array {
    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

/// The graph's nodes and its initialisers by name.
pub struct Graph {
    pub nodes: Vec<NodeProto>,
    /// Initialisers in file order (the order numpy's `{i.name: i}` dict iterates).
    pub initializer_order: Vec<String>,
    pub initializers: HashMap<String, TensorProto>,
}

impl Graph {
    pub fn decode(bytes: &[u8]) -> Result<Graph> {
        let model = ModelProto::decode(bytes).context("the ONNX file is not a valid ModelProto")?;
        let graph = model.graph.context("the ONNX model has no graph")?;
        let mut initializer_order = Vec::with_capacity(graph.initializer.len());
        let mut initializers = HashMap::with_capacity(graph.initializer.len());
        for t in graph.initializer {
            if !initializers.contains_key(&t.name) {
                initializer_order.push(t.name.clone());
            }
            initializers.insert(t.name.clone(), t);
        }
        Ok(Graph { nodes: graph.node, initializer_order, initializers })
    }

    pub fn has(&self, name: &str) -> bool {
        self.initializers.contains_key(name)
    }

    /// The initialiser `name` as f32 (`numpy_helper.to_array(...).astype(np.float32)`).
    pub fn array(&self, name: &str) -> Result<Array> {
        let t = self.initializers.get(name).with_context(|| format!("ONNX initialiser {name:?} not found"))?;
        to_array(t).with_context(|| format!("ONNX initialiser {name:?}"))
    }

    pub fn data_type(&self, name: &str) -> Option<i32> {
        self.initializers.get(name).map(|t| t.data_type)
    }
}

fn to_array(t: &TensorProto) -> Result<Array> {
    if t.data_location == EXTERNAL {
        bail!("stored in an external file, which this conversion does not read");
    }
    let shape: Vec<usize> =
        t.dims.iter().map(|&d| usize::try_from(d).with_context(|| format!("negative dimension {d}"))).collect::<Result<_>>()?;
    let numel: usize = shape.iter().product();
    let raw = &t.raw_data;
    let data: Vec<f32> = match t.data_type {
        FLOAT if !raw.is_empty() => raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        FLOAT => t.float_data.clone(),
        INT8 if !raw.is_empty() => raw.iter().map(|&b| f32::from(b as i8)).collect(),
        UINT8 if !raw.is_empty() => raw.iter().map(|&b| f32::from(b)).collect(),
        // int8/uint8/int32 without raw_data are stored one value per int32_data element
        INT8 | UINT8 | INT32 if raw.is_empty() => t.int32_data.iter().map(|&v| v as f32).collect(),
        INT32 => raw.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32).collect(),
        INT64 if !raw.is_empty() => raw.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32).collect(),
        INT64 => t.int64_data.iter().map(|&v| v as f32).collect(),
        other => bail!("data type {other} is not one this conversion reads"),
    };
    if data.len() != numel {
        bail!("{} values for shape {shape:?}", data.len());
    }
    Ok(Array { shape, data })
}
