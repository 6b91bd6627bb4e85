//! The pod's side of DNS: how a stub resolver (glibc, musl, Go's pure
//! resolver) turns one name into the queries a node cache receives, from
//! the search list and options of its resolv.conf. `nodens querygen` uses
//! it to write load-test input with the real query mix; it knows nothing of
//! the request path.

pub mod querygen;
pub(crate) mod resolv_conf;
pub(crate) mod walk;

pub use resolv_conf::StubConfig;
pub use walk::{Family, Stub, walk};
