//! What the crate's unit tests share.

/// Implements the listed [`Backend`](crate::backend::Backend) methods by forwarding them to the
/// backend in field `$inner`. Test backends wrap the host backend and change a few calls (count
/// them, cut them, add a path); they write those and forward the rest:
/// `forward_backend!(host: capabilities, alloc_block, free_block, ...);` inside the `impl`.
macro_rules! forward_backend {
    ($inner:ident: $($method:ident),+ $(,)?) => {
        $($crate::test_support::forward_backend!(@ $inner $method);)+
    };
    (@ $i:ident capabilities) => {
        fn capabilities(&self) -> &$crate::backend::Capabilities {
            self.$i.capabilities()
        }
    };
    (@ $i:ident alloc_block) => {
        fn alloc_block(
            &self,
            desc: &$crate::backend::BlockDesc<'_>,
        ) -> $crate::Result<$crate::backend::BlockId> {
            self.$i.alloc_block(desc)
        }
    };
    (@ $i:ident free_block) => {
        fn free_block(&self, block: $crate::backend::BlockId) -> $crate::Result<()> {
            self.$i.free_block(block)
        }
    };
    (@ $i:ident write_mapped) => {
        fn write_mapped(
            &self,
            block: $crate::backend::BlockId,
            offset: u64,
            data: &[u8],
        ) -> $crate::Result<()> {
            self.$i.write_mapped(block, offset, data)
        }
    };
    (@ $i:ident read_mapped) => {
        fn read_mapped(
            &self,
            block: $crate::backend::BlockId,
            offset: u64,
            out: &mut [u8],
        ) -> $crate::Result<()> {
            self.$i.read_mapped(block, offset, out)
        }
    };
    (@ $i:ident copy) => {
        fn copy(
            &self,
            src: $crate::backend::BlockRange,
            dst: $crate::backend::BlockRange,
        ) -> $crate::Result<$crate::backend::Ticket> {
            self.$i.copy(src, dst)
        }
    };
    (@ $i:ident fill_zero) => {
        fn fill_zero(
            &self,
            range: $crate::backend::BlockRange,
        ) -> $crate::Result<$crate::backend::Ticket> {
            self.$i.fill_zero(range)
        }
    };
    (@ $i:ident dispatch) => {
        fn dispatch(
            &self,
            op: &$crate::Op,
            bindings: &[$crate::backend::BlockRange],
        ) -> $crate::Result<$crate::backend::Ticket> {
            self.$i.dispatch(op, bindings)
        }
    };
    (@ $i:ident flush) => {
        fn flush(&self) -> $crate::Result<$crate::backend::Ticket> {
            self.$i.flush()
        }
    };
    (@ $i:ident completed) => {
        fn completed(&self) -> $crate::Result<$crate::backend::Ticket> {
            self.$i.completed()
        }
    };
    (@ $i:ident wait_timeout) => {
        fn wait_timeout(
            &self,
            ticket: $crate::backend::Ticket,
            timeout: Option<std::time::Duration>,
        ) -> $crate::Result<()> {
            self.$i.wait_timeout(ticket, timeout)
        }
    };
    (@ $i:ident extensions) => {
        fn extensions(&self) -> $crate::backend::Extensions<'_> {
            self.$i.extensions()
        }
    };
}
pub(crate) use forward_backend;
