//! Element types and the operands of an op's signature: what each binding holds and its size.
//!
//! Kept apart from the op set (`ops.rs`) because every layer reads them: the graph checks tensor
//! dtypes against them, the validating front binding sizes, the kernels their packing.

/// Element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float (storage only; no op computes in it).
    F64,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer (token ids).
    U32,
    /// 64-bit signed integer (storage only).
    I64,
    /// 8-bit unsigned integer (storage only).
    U8,
    /// 16-bit unsigned integer (storage only).
    U16,
    /// IEEE half float: an f16 weight ([`WeightFormat::F16`](crate::WeightFormat::F16)); ops read it, none writes it.
    F16,
    /// 8-bit signed integer: an int8 weight ([`WeightFormat::Int8`](crate::WeightFormat::Int8)); ops read it, none writes it.
    I8,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> u64 {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::F16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// Short lowercase name ("f32", ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::F16 => "f16",
            DType::I8 => "i8",
        }
    }
}

/// One operand of an op: its element type and element count.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Element type.
    pub dtype: DType,
    /// Number of elements.
    pub len: u64,
}

impl Operand {
    /// Size of its binding in bytes: the elements rounded up to whole 32-bit words (kernels read
    /// f16 and int8 weights as packed `u32` words). At most `u32::MAX` elements of at most 8
    /// bytes: never overflows.
    pub fn size(&self) -> u64 {
        (self.len * self.dtype.size()).next_multiple_of(4)
    }
}

/// The inputs and outputs of an op, in binding order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Inputs, in binding order.
    pub inputs: Vec<Operand>,
    /// Outputs, bound after the inputs.
    pub outputs: Vec<Operand>,
}

impl Signature {
    /// Every operand in binding order: the inputs, then the outputs.
    pub fn operands(&self) -> impl Iterator<Item = &Operand> {
        self.inputs.iter().chain(&self.outputs)
    }
}
