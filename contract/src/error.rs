//! The one error type of tensormem.
//!
//! Every failure in core and in every backend maps into [`Error`]. Variants carry the numbers the
//! caller needs so a message can say what to do; [`Error::is_retryable`] says whether to retry.

mod checks;
mod classify;
mod graph;
mod growth;
mod kv;
mod oom;
mod planner;

pub use graph::GraphError;
pub use growth::GrowthError;
pub use kv::KvError;
pub use oom::OomReport;
pub use tensormem_plan::ArgumentError;

/// Result alias used throughout tensormem.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure tensormem reports. Nothing in tensormem panics on bad input; it returns one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request for zero bytes. Every allocation and transfer must cover at least one byte.
    #[error("zero-size request: {what} of 0 bytes (every {what} must be at least 1 byte)")]
    ZeroSize {
        /// What was requested ("allocation", "upload", "block", ...).
        what: &'static str,
    },
    /// An alignment that is zero, not a power of two, or above the largest supported alignment.
    #[error(
        "invalid alignment {align}: alignments must be powers of two between 1 and {max} bytes"
    )]
    InvalidAlignment {
        /// The alignment asked for, in bytes.
        align: u64,
        /// The largest alignment supported, in bytes.
        max: u64,
    },
    /// A request that can never succeed on this device or pool, whatever is freed first.
    #[error("{what} of {requested} bytes exceeds the limit of {limit} bytes ({limit_name})")]
    TooLarge {
        /// What was requested ("allocation", "block", "binding", ...).
        what: &'static str,
        /// Bytes asked for.
        requested: u64,
        /// The limit, in bytes.
        limit: u64,
        /// Where the limit comes from (a capability or configuration name).
        limit_name: &'static str,
    },
    /// Not enough free memory right now. The report says what is reserved, in use and free, and
    /// what the caller can do. Retrying after frees complete can succeed.
    #[error("{0}")]
    OutOfMemory(Box<OomReport>),
    /// A handle freed twice.
    #[error("double free of {what} (slot {slot}, generation {generation}): it was already freed")]
    DoubleFree {
        /// The kind of handle.
        what: &'static str,
        /// The handle's slot index.
        slot: u32,
        /// The generation the handle carries.
        generation: u32,
    },
    /// A handle used after it was freed (its slot has moved on to a later generation).
    #[error(
        "use after free: {what} (slot {slot}, generation {generation}) was freed; the slot is now at generation {current}"
    )]
    StaleHandle {
        /// The kind of handle.
        what: &'static str,
        /// The handle's slot index.
        slot: u32,
        /// The generation the handle carries.
        generation: u32,
        /// The slot's current generation.
        current: u32,
    },
    /// A handle that this pool never issued (another pool's, or forged).
    #[error("{what} handle (slot {slot}) does not belong to this {owner}")]
    ForeignHandle {
        /// The kind of handle.
        what: &'static str,
        /// The handle's slot index.
        slot: u32,
        /// The kind of object asked to use it.
        owner: &'static str,
    },
    /// A byte range that does not fit inside the allocation or block it addresses.
    #[error(
        "range out of bounds: offset {offset} + size {size} exceeds {limit} bytes of the {what}"
    )]
    OutOfBounds {
        /// What the range addresses.
        what: &'static str,
        /// Start of the range, in bytes.
        offset: u64,
        /// Length of the range, in bytes.
        size: u64,
        /// Length of the addressed object, in bytes.
        limit: u64,
    },
    /// Two sizes or shapes that must agree do not.
    #[error("size mismatch in {what}: expected {expected}, got {actual}")]
    SizeMismatch {
        /// What was being matched.
        what: String,
        /// The size or element count expected.
        expected: u64,
        /// The size or element count given.
        actual: u64,
    },
    /// The backend cannot run here: no driver, no library, no adapter.
    #[error("backend {backend} is unavailable: {reason}")]
    BackendUnavailable {
        /// Backend name ("cuda", "vulkan", "wgpu", "host").
        backend: &'static str,
        /// Why, in words a user can act on.
        reason: String,
    },
    /// The device was lost (driver reset, removal, hang). The runtime must be recreated.
    #[error("device lost on {backend}: {detail}")]
    DeviceLost {
        /// Backend name.
        backend: &'static str,
        /// What the driver said.
        detail: String,
    },
    /// A device wait past its limit; the work is still queued, so waiting longer can succeed.
    #[error(
        "{backend}: {what} did not complete within {timeout:?} (raise the limit: \
         RuntimeConfig::wait_timeout, or the samples' --timeout SECS; 0 waits forever)"
    )]
    Timeout {
        /// Backend name.
        backend: &'static str,
        /// What was waited for ("ticket 12", "the map callback", ...).
        what: String,
        /// The limit that ran out.
        timeout: std::time::Duration,
    },
    /// A native API call failed in a way no other variant describes. Keeps the native code.
    #[error("{backend}: {api} failed (code {code}): {message}")]
    Backend {
        /// Backend name.
        backend: &'static str,
        /// The native API that failed.
        api: &'static str,
        /// The native result code (0 when the API has none).
        code: i64,
        /// The driver's message.
        message: String,
    },
    /// The backend or device does not support what was asked.
    #[error("unsupported on {backend}: {what}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// What is unsupported.
        what: String,
    },
    /// An argument that breaks a rule of its call (a zero count, an index out of range, ...).
    #[error(transparent)]
    Argument(#[from] ArgumentError),
    /// A tensor used against its kind or place in its graph or model.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A growth call (extend, commit, decommit, remap) that does not fit the block's layout.
    #[error(transparent)]
    Growth(#[from] GrowthError),
    /// A refusal no typed variant describes; the message is all there is to say.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A malformed input file or text (CSV plan, trace, weights).
    #[error("{source_name}:{line}: {message}")]
    Malformed {
        /// File name or other description of the input.
        source_name: String,
        /// 1-based line number (0 when the input has no lines).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Allocations still live when a pool or runtime in strict mode was dropped or checked.
    #[error("{count} allocation(s) leaked, {bytes} bytes:\n{report}")]
    Leak {
        /// Number of live allocations.
        count: usize,
        /// Their total size in bytes.
        bytes: u64,
        /// One line per allocation: label, size, and where it was made when known.
        report: String,
    },
    /// Guard bytes around an allocation were overwritten: something wrote out of bounds.
    #[error("memory corruption: {0}")]
    Corruption(String),

    // ---- Raised by the validating front (`crate::validate`), the same on every backend. ----
    /// An offset or size that is not a multiple of the alignment the device requires.
    #[error("misaligned {what}: {value} is not a multiple of {align} bytes ({align_name})")]
    Misaligned {
        /// What is misaligned ("copy offset", "binding offset", "write size", ...).
        what: &'static str,
        /// The offending offset or size, in bytes.
        value: u64,
        /// The required alignment, in bytes.
        align: u64,
        /// The capability that sets it (`copy_align`, `binding_align`).
        align_name: &'static str,
    },
    /// A kernel binding whose byte size is not exactly its operand's size (larger or smaller).
    #[error(
        "binding size of {op} operand {index} `{operand}`: the op needs exactly {expected} bytes, the binding has {actual}"
    )]
    BindingSize {
        /// The op's name.
        op: &'static str,
        /// The operand's name.
        operand: &'static str,
        /// Binding index (inputs, then outputs).
        index: usize,
        /// Bytes the op reads or writes.
        expected: u64,
        /// Bytes the binding covers.
        actual: u64,
    },
    /// A kernel dispatch with the wrong number of bindings.
    #[error("{op} takes {expected} bindings ({operands}), got {actual}")]
    BindingCount {
        /// The op's name.
        op: &'static str,
        /// Bindings the op takes (inputs, then outputs).
        expected: usize,
        /// Bindings given.
        actual: usize,
        /// The operand names, in binding order.
        operands: String,
    },
    /// Two ranges that must not share bytes do (an op's output and another binding, a copy's ends).
    #[error(
        "overlap in block {block}: {what} [{first_offset}, +{first_size}) and [{second_offset}, +{second_size}) share bytes"
    )]
    Overlap {
        /// What overlaps ("output and input of relu", "copy source and destination").
        what: String,
        /// The block both ranges are in.
        block: u64,
        /// Start of the first range, in bytes.
        first_offset: u64,
        /// Length of the first range, in bytes.
        first_size: u64,
        /// Start of the second range, in bytes.
        second_offset: u64,
        /// Length of the second range, in bytes.
        second_size: u64,
    },
    /// Size or shape arithmetic that does not fit its integer type (`u64` counts, `u32` indices).
    #[error("arithmetic overflow: {what} does not fit in {limit_name}")]
    ArithmeticOverflow {
        /// The quantity being computed ("conv2d output height", "permute element count").
        what: String,
        /// The type or limit it overflows ("u64", "u32 kernel index").
        limit_name: &'static str,
    },
    /// A typed transfer or binding whose element type is not the tensor's.
    #[error("dtype mismatch in {what}: the tensor holds {expected:?}, the call uses {actual:?}")]
    DTypeMismatch {
        /// The call.
        what: String,
        /// The tensor's element type.
        expected: crate::ops::DType,
        /// The element type of the data or operand.
        actual: crate::ops::DType,
    },
    /// A read of a graph tensor that is not an output: its bytes are reused by the plan and hold
    /// something else after the run.
    #[error(
        "tensor {tensor} ('{name}') is not an output of the graph; mark it with Graph::output to read it"
    )]
    NotAnOutput {
        /// The tensor's index in its graph.
        tensor: usize,
        /// Its name.
        name: String,
    },
    /// A tensor id that does not belong to the graph it is used with.
    #[error("tensor {tensor} is not in this graph ({tensors} tensors)")]
    ForeignTensor {
        /// The id's index.
        tensor: usize,
        /// Tensors the graph declares.
        tensors: usize,
    },
    /// A block id the backend does not know: never allocated, or already freed.
    #[error("{backend}: block {block} is not live (never allocated, or already freed)")]
    UnknownBlock {
        /// Backend name.
        backend: &'static str,
        /// The block id.
        block: u64,
    },
    /// A wait for a ticket that was never issued.
    #[error("wait for ticket {ticket}, but only {issued} tickets were issued")]
    UnknownTicket {
        /// The ticket asked for.
        ticket: u64,
        /// The last ticket issued.
        issued: u64,
    },
    /// Host access to a block that is not host-visible.
    #[error("block {block} ({kind}) is not host-visible on {backend}")]
    NotHostVisible {
        /// Backend name.
        backend: &'static str,
        /// The block id.
        block: u64,
        /// The block's memory kind.
        kind: &'static str,
    },
    /// A block of the wrong memory kind for its role: kernels bind `DeviceLocal` blocks only,
    /// copies read `DeviceLocal` or `Upload` blocks and write `DeviceLocal` or `Readback` ones.
    #[error("block {block} is {kind} memory and cannot be the {role} (that takes {allowed})")]
    WrongMemoryKind {
        /// The role ("kernel binding", "copy source", "copy destination").
        role: &'static str,
        /// The block id.
        block: u64,
        /// The block's kind.
        kind: &'static str,
        /// The kinds the role takes.
        allowed: &'static str,
    },
    /// A bug in tensormem: an internal invariant did not hold. The runtime that saw it is marked
    /// broken (later calls return [`Error::DeviceLost`]). Made only by [`Error::invariant`].
    #[error("internal invariant violated ({invariant}): {detail}; please report this bug")]
    InvariantViolated {
        /// The broken invariant, named.
        invariant: &'static str,
        /// What was observed.
        detail: String,
    },
    /// An I/O error while reading or writing a file.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A NUMA node that cannot hold this runtime's host memory: the topology has no such node, or
    /// this process's cpuset (`mems`) excludes it. Choose one of `usable`, or no node.
    #[error("NUMA node {node} cannot be used: {reason} (usable nodes: {usable:?})")]
    NumaNode {
        /// The node asked for.
        node: u32,
        /// The nodes that can be used (empty when they could not be read).
        usable: Vec<u32>,
        /// Why the node cannot be used.
        reason: String,
    },
    /// A planning instance whose offsets could overflow `u64`: the buffers of one time-connected
    /// group, stacked with their alignment padding, may need more than the planner's offset limit.
    #[error(
        "{buffers} buffers live in one connected span of time need up to {padded_total} bytes \
         stacked (sizes plus alignment padding), beyond the planner's offset limit of {limit} bytes"
    )]
    PlanTooLarge {
        /// Buffers in the group.
        buffers: usize,
        /// Their summed size plus alignment padding, in bytes (exact, not capped).
        padded_total: u128,
        /// The largest stacked total the planner accepts, in bytes.
        limit: u64,
    },
    /// An op or copy whose operands live on different devices. The runtime never copies
    /// silently: move one operand with `tensormem::DeviceSet::copy` first.
    #[error(
        "{op}: operand `{first_operand}` is on {first} but operand `{second_operand}` is on \
         {second}; copy one of them across first (DeviceSet::copy / DeviceSet::transfer)"
    )]
    MixedDevices {
        /// The op or call.
        op: String,
        /// The first operand's name and device.
        first_operand: String,
        /// Its device.
        first: crate::backend::DeviceId,
        /// The first operand on another device.
        second_operand: String,
        /// Its device.
        second: crate::backend::DeviceId,
    },
    /// A tensor used with the runtime of another device.
    #[error("{what}: the tensor is on {tensor} but this runtime is {runtime}")]
    WrongDevice {
        /// The call.
        what: String,
        /// The tensor's device.
        tensor: crate::backend::DeviceId,
        /// The runtime's device.
        runtime: crate::backend::DeviceId,
    },
    /// A device id that the device set does not have.
    #[error("{device} is not in this device set ({devices} devices)")]
    UnknownDevice {
        /// The id asked for.
        device: crate::backend::DeviceId,
        /// Devices in the set.
        devices: usize,
    },
    /// A device budget that no offload schedule can meet: at the named op, the tensors that must
    /// be on the device together need more bytes than the budget. Raise it or shrink the op.
    #[error(
        "device budget of {budget} bytes is below what op {step} ('{op}') needs on the device at \
         once: {needed} bytes (its operands and whatever cannot leave around it)"
    )]
    BudgetBelowWorkingSet {
        /// Index of the op in the graph's order.
        step: usize,
        /// The op's label.
        op: String,
        /// Bytes that must be resident while it runs.
        needed: u64,
        /// The budget, in bytes.
        budget: u64,
    },
    /// A float weight handed to a model holds a NaN or an infinity. Fix or re-export the weights;
    /// nothing was bound (the weight keeps its previous binding).
    #[error("weight '{tensor}' holds {value} at element {element}: weights must be finite")]
    NonFiniteWeight {
        /// The weight's name in the graph.
        tensor: String,
        /// Index of the first non-finite element.
        element: u64,
        /// That element (NaN, inf or -inf).
        value: f32,
    },
    /// The paged KV cache refused an operation; nothing changed.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// An op over a tensor split across blocks that cannot run as parts each binding within one
    /// segment. Give the operand an outermost axis that is the op's, or keep it under the limit.
    #[error(
        "{op} cannot run over operand `{operand}` (binding {binding}), a tensor split into \
         {segments} segments across blocks: {reason}"
    )]
    SegmentedOperand {
        /// The op's name.
        op: String,
        /// The operand's name in the op's signature.
        operand: String,
        /// The operand's binding index (inputs, then outputs).
        binding: usize,
        /// Segments the tensor is split into.
        segments: usize,
        /// Why no split of the op keeps each part's binding in one segment.
        reason: String,
    },
}
