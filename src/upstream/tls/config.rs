//! The `[zone.tls]` section: how a zone whose `transport = "tls"` checks
//! its upstreams' certificates (RFC 7858 DNS over TLS), and its compile
//! step, which reads the certificate files once per configuration load.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use super::TlsClient;
use crate::upstream::Transport;

/// `[zone.tls]`: the name the upstreams' certificates must carry and who
/// may have signed them. CoreDNS's `forward` `tls_servername` and `tls`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The name every upstream of the zone must prove (its certificate's
    /// subject alternative names). Unset: each upstream's IP address.
    pub server_name: Option<String>,
    /// A PEM file of the certificate authorities to trust. Unset: the
    /// system's roots (`SSL_CERT_FILE`, `SSL_CERT_DIR`, /etc/ssl/certs),
    /// which nodens's image does not carry.
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM chain) and its key, for upstreams that
    /// ask for one (mutual TLS); both or neither.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Why a `[zone.tls]` section cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("[zone.tls] is set but transport is not \"tls\"")]
    NotTlsTransport,
    #[error(
        "upstream {0} with transport \"tls\": DNS over TLS is served on port 853; write the upstream's TLS port"
    )]
    Port53(SocketAddr),
    #[error("tls.server_name `{0}` is not a DNS name or an IP address")]
    ServerName(String),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no PEM {what}", path.display())]
    NoPem { path: PathBuf, what: &'static str },
    #[error("{}: {source}", path.display())]
    BadPem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{}: a certificate the TLS library refuses as a root: {source}", path.display())]
    BadRoot {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error(
        "no system root certificates found ({0}); set tls.ca to the PEM file of the authority that signed the upstreams' certificates"
    )]
    NoSystemRoots(String),
    #[error("tls.cert and tls.key go together: set both or neither")]
    HalfClientCert,
    #[error("the client certificate and key: {0}")]
    ClientCert(rustls::Error),
}

impl TlsConfigError {
    /// The zone's key the error is about, for its line.
    pub fn field(&self) -> &'static str {
        match self {
            TlsConfigError::Port53(_) => "upstreams",
            _ => "tls",
        }
    }
}

/// A zone's TLS client: `transport = "tls"` with its section (or the
/// defaults: the system's roots, each upstream's address as its name), or
/// none. A section on another transport, or a TLS upstream on port 53
/// (written without its port, most likely), is an error, not a query in
/// the clear.
pub(crate) fn for_zone(
    transport: Transport,
    section: Option<&TlsConfig>,
    upstreams: &[SocketAddr],
) -> Result<Option<TlsClient>, TlsConfigError> {
    if transport != Transport::Tls {
        return match section {
            Some(_) => Err(TlsConfigError::NotTlsTransport),
            None => Ok(None),
        };
    }
    if let Some(&plain) = upstreams.iter().find(|a| a.port() == 53) {
        return Err(TlsConfigError::Port53(plain));
    }
    section.cloned().unwrap_or_default().compile().map(Some)
}

impl TlsConfig {
    /// The client this section describes: its roots and client certificate
    /// read now, so that a reload sees a rotated file.
    pub fn compile(&self) -> Result<TlsClient, TlsConfigError> {
        let server_name = match &self.server_name {
            None => None,
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|_| TlsConfigError::ServerName(name.clone()))?,
            ),
        };
        let mut identity = format!("{:?}|", self.server_name).into_bytes();
        let mut roots = RootCertStore::empty();
        match &self.ca {
            Some(path) => {
                let pem = read(path, &mut identity)?;
                for cert in certificates(path, &pem)? {
                    roots.add(cert).map_err(|source| TlsConfigError::BadRoot {
                        path: path.clone(),
                        source,
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = found
                        .errors
                        .first()
                        .map_or_else(|| "none in the usual places".to_string(), |e| e.to_string());
                    return Err(TlsConfigError::NoSystemRoots(why));
                }
                identity.extend_from_slice(format!("system roots: {added}").as_bytes());
            }
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots);
        let config = match (&self.cert, &self.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = certificates(cert, &read(cert, &mut identity)?)?;
                let key_pem = read(key, &mut identity)?;
                let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| {
                    TlsConfigError::BadPem {
                        path: key.clone(),
                        source,
                    }
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(TlsConfigError::ClientCert)?
            }
            _ => return Err(TlsConfigError::HalfClientCert),
        };
        Ok(TlsClient::new(Arc::new(config), server_name, identity))
    }
}

/// A file's bytes, appended to `identity` (what tells a reload whether
/// the client changed).
fn read(path: &Path, identity: &mut Vec<u8>) -> Result<Vec<u8>, TlsConfigError> {
    let bytes = std::fs::read(path).map_err(|source| TlsConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    identity.extend_from_slice(&bytes);
    Ok(bytes)
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsConfigError::BadPem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoPem {
            path: path.to_path_buf(),
            what: "certificates",
        });
    }
    Ok(certs)
}
