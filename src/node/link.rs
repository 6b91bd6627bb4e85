//! The interface that holds the listen addresses, through rtnetlink: a
//! `dummy` link as NodeLocal DNSCache makes, or an `ifb` link on kernels
//! built without dummy (an ifb holds local addresses just the same).

use std::net::{IpAddr, SocketAddr};

use futures_util::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::{Handle, LinkDummy, LinkIfb, LinkUnspec};

use super::config::LinkKind;

/// What the link looks like now.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LinkState {
    pub exists: bool,
    pub up: bool,
    pub kind: Option<String>,
    pub addresses: Vec<IpAddr>,
}

/// Runs `work` with a netlink connection driven in the same task, so
/// every request is sent from the calling thread: the one thread that
/// keeps `CAP_NET_ADMIN` (see `privileges`), which the kernel checks
/// against the sender.
pub(crate) async fn with_netlink<T, F: Future<Output = Result<T, rtnetlink::Error>>>(
    work: impl FnOnce(Handle) -> F,
) -> Result<T, super::NodeError> {
    let (connection, handle, _) = rtnetlink::new_connection()?;
    tokio::select! {
        done = work(handle) => Ok(done?),
        () = connection => Err(super::NodeError::Io(std::io::Error::other("netlink connection closed"))),
    }
}

async fn find(handle: &Handle, name: &str) -> Result<Option<LinkMessage>, rtnetlink::Error> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(link) => Ok(link),
        // The kernel answers ENODEV for a name it does not know.
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(None),
        Err(e) => Err(e),
    }
}

async fn addresses(handle: &Handle, index: u32) -> Result<Vec<IpAddr>, rtnetlink::Error> {
    let mut found = Vec::new();
    let mut listed = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute();
    while let Some(message) = listed.try_next().await? {
        found.extend(address_of(&message));
    }
    Ok(found)
}

fn address_of(message: &AddressMessage) -> Option<IpAddr> {
    message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(ip) => Some(*ip),
        _ => None,
    })
}

/// The link called `name`, as it is.
pub(crate) async fn state(handle: &Handle, name: &str) -> Result<LinkState, rtnetlink::Error> {
    let Some(link) = find(handle, name).await? else {
        return Ok(LinkState::default());
    };
    let kind = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            rtnetlink::packet_route::link::LinkInfo::Kind(k) => Some(k.to_string()),
            _ => None,
        }),
        _ => None,
    });
    Ok(LinkState {
        exists: true,
        up: link.header.flags.contains(LinkFlags::Up),
        kind,
        addresses: addresses(handle, link.header.index).await?,
    })
}

/// Makes the link exist, be up and hold `addrs` (a host prefix each).
/// Returns what had to be done, empty when all was in place.
pub(crate) async fn ensure(
    handle: &Handle,
    name: &str,
    kind: LinkKind,
    addrs: &[SocketAddr],
) -> Result<Vec<String>, rtnetlink::Error> {
    let mut done = Vec::new();
    let link = match find(handle, name).await? {
        Some(link) => link,
        None => {
            create(handle, name, kind).await?;
            done.push(format!("created link {name}"));
            find(handle, name)
                .await?
                .ok_or(rtnetlink::Error::RequestFailed)?
        }
    };
    let index = link.header.index;
    if !link.header.flags.contains(LinkFlags::Up) {
        handle
            .link()
            .change(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await?;
        done.push(format!("set {name} up"));
    }
    let present = addresses(handle, index).await?;
    let mut wanted: Vec<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
    wanted.dedup();
    for ip in wanted {
        if present.contains(&ip) {
            continue;
        }
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        let mut request = handle.address().add(index, ip, prefix);
        // No duplicate address detection: the address must be usable (and
        // bindable) at once, and nothing else on the node should hold it.
        request.message_mut().header.flags |=
            rtnetlink::packet_route::address::AddressHeaderFlags::Nodad;
        request.execute().await?;
        done.push(format!("added {ip}/{prefix} to {name}"));
    }
    Ok(done)
}

async fn create(handle: &Handle, name: &str, kind: LinkKind) -> Result<(), rtnetlink::Error> {
    let dummy = || {
        handle
            .link()
            .add(LinkDummy::new(name).up().build())
            .execute()
    };
    let ifb = || handle.link().add(LinkIfb::new(name).up().build()).execute();
    match kind {
        LinkKind::Dummy => dummy().await,
        LinkKind::Ifb => ifb().await,
        LinkKind::Auto => match dummy().await {
            // A kernel without the dummy driver answers "not supported".
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::EOPNOTSUPP => {
                tracing::info!(
                    interface = name,
                    "no dummy link type in this kernel: using ifb"
                );
                ifb().await
            }
            other => other,
        },
    }
}

/// Deletes the link (and with it its addresses); nothing if it is not there.
pub(crate) async fn remove(handle: &Handle, name: &str) -> Result<bool, rtnetlink::Error> {
    match find(handle, name).await? {
        Some(link) => {
            handle.link().del(link.header.index).execute().await?;
            Ok(true)
        }
        None => Ok(false),
    }
}
