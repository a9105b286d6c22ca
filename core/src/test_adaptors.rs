//! Test backends over the host backend: `host_adaptor!(Type, growable)` or `host_adaptor!(Type, peer)`
//! implements `BackendAdaptor` for a test type whose `host: HostBackend` field takes every call
//! it does not override, and which offers itself as its one capability trait (the test writes
//! that trait's impl): `Growable` where the host offers growth, or `Peer`.

macro_rules! host_adaptor {
    ($ty:ty, growable) => {
        host_adaptor!($ty, |this| crate::backend::Extensions {
            growable: crate::backend::Backend::extensions(&this.host)
                .growable
                .map(|_| this as &dyn crate::backend::Growable),
            ..crate::backend::Extensions::default()
        });
    };
    ($ty:ty, peer) => {
        host_adaptor!($ty, |this| crate::backend::Extensions {
            peer: Some(this),
            ..crate::backend::Extensions::default()
        });
    };
    ($ty:ty, |$this:ident| $extensions:expr) => {
        impl crate::backend::BackendAdaptor for $ty {
            type Inner = crate::host::HostBackend;
            fn inner(&self) -> &crate::host::HostBackend {
                &self.host
            }
            fn extensions(&self) -> crate::backend::Extensions<'_> {
                let $this = self;
                $extensions
            }
        }
    };
}
pub(crate) use host_adaptor;
