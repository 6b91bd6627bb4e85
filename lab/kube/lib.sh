# Shared by lab/kube/{build,up,down,smoke}: versions, cache paths, the cluster's fixed
# addresses. Sourced, not run.
for d in /usr/local/sbin /usr/sbin /sbin /usr/local/go/bin "$HOME/go/bin"; do
  [[ -d $d && ":$PATH:" != *":$d:"* ]] && PATH="$PATH:$d"
done
export PATH

# `cmd | contains [GREP_FLAGS] PATTERN`: grep -q that reads its input to the end.
# grep -q exits at the first match; a producer that writes in pieces (nft writes
# line by line) then dies of SIGPIPE, and under pipefail the pipeline fails (or,
# negated, passes) whatever was found.
contains() {
  local input
  input=$(cat) || return 1
  grep -q "$@" <<<"$input"
}

K8S_VERSION=${K8S_VERSION:-v1.33.13}
# kube-proxy's mode: iptables (its default) or nftables (GA in 1.33). Read by up; the
# env file carries the mode of the running cluster to the other scripts.
PROXY_MODE=${PROXY_MODE:-iptables}
# The pod network: "bridge" (the CNI bridge plugin, kube-proxy in PROXY_MODE) or "cilium"
# (Cilium's agent and operator as host processes, its kube-proxy replacement, no kube-proxy;
# CILIUM.md). Read by up; the env file carries it (and PROXY_MODE=cilium) to the others.
CNI=${CNI:-bridge}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
NODENS_CACHE=${NODENS_CACHE:-$HOME/.cache/nodens}
GOVERSION=$(go env GOVERSION 2>/dev/null || echo nogo)
COREDNS_BIN=${COREDNS_BIN:-$(go env GOPATH 2>/dev/null)/bin/coredns}

K8S_DIR=$NODENS_CACHE/k8s-$K8S_VERSION-$GOVERSION
HELM_DIR=$NODENS_CACHE/helm-$HELM_VERSION-$GOVERSION
CRI_CLEAN=$NODENS_CACHE/cri-clean-$K8S_VERSION-$GOVERSION/cri-clean
# etcd 3.5 (Debian's 3.4.23 cannot report watch progress, which an API server's
# streaming lists need): built by lab/kube/build etcd.
ETCD_VERSION=${ETCD_VERSION:-v3.5.21}
ETCD35=$NODENS_CACHE/etcd-$ETCD_VERSION-$GOVERSION/etcd

# Cilium (CNI=cilium), built by lab/kube/cilium-build.
CILIUM_VERSION=${CILIUM_VERSION:-v1.18.11}
CILIUM_DIR=$NODENS_CACHE/cilium-$CILIUM_VERSION-$GOVERSION
CILIUM_BPFFS=/sys/fs/bpf                         # the agent's --bpf-root (its default)
CILIUM_CGROUP=/run/cilium/cgroupv2               # its --cgroup-root (mounted by the agent)
# The pods' containment with Cilium, in an nf_tables table of its own (removed by down).
NODENS_FWD_TABLE=nodens_kube_fwd
# One-way sysctl the agent writes (1; 2 on this machine): up binds it read-only.
BPF_SYSCTL=/proc/sys/kernel/unprivileged_bpf_disabled

PAUSE_IMAGE=registry.k8s.io/pause:3.10-nodens
BUSYBOX_IMAGE=docker.io/library/busybox:nodens
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:v1.13.2-nodens
# The repository deploy/image/build names nodens's image (tagged with the
# version) and the lab imports it as: every helm install passes it
# (image.repository has no default).
NODENS_IMAGE=docker.io/library/nodens

# The image cache is keyed on what goes into the images.
images_key() {
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  {
    echo "$PAUSE_IMAGE $BUSYBOX_IMAGE $COREDNS_IMAGE"
    sha256sum "$here/../../deploy/image/oci-archive" "$here/pause.c" "$here/build"
    sha256sum /bin/busybox 2>/dev/null || echo no-busybox
    sha256sum "$COREDNS_BIN" 2>/dev/null || echo no-coredns
  } | sha256sum | cut -c1-16
}
IMAGES_DIR=$NODENS_CACHE/images-$(images_key)

# The cluster (one per machine: fixed names, addresses and paths).
KUBE_STATE=${KUBE_STATE:-/run/nodens-kube}      # everything up writes, removed by down
KUBE_ENV=$KUBE_STATE/env                         # sourced by other scripts
ETCD_DATA=/dev/shm/nodens-kube-etcd
NODE_NAME=nodens-node
NODE_LINK=nodens-node0                           # a bridge with no ports holding NODE_IP/32
NODE_IP=172.31.255.1
NODE_NET=172.31.255.0/24                         # routed to NODE_LINK: never leaves the machine
AUTH_IP=172.31.255.53                            # the test authoritative server (NSD), same link
AUTH_PORT=53
EXT_ZONE=ext.test                                # served by AUTH_IP, forwarded to by CoreDNS
EXT_WWW_IP=172.31.255.80                         # www.ext.test (an address nothing answers on)
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
# A second, IPv6 Service range (the API server only): Services that ask for IPv6
# (the chart's IPv6 and dual-stack presets) validate; pods stay IPv4-only.
SERVICE_CIDR6=fd00:10:96::/112
CLUSTER_DNS=10.96.0.10
CLUSTER_DOMAIN=cluster.local
CNI_BRIDGE=nodens-cni0
APISERVER_PORT=6443
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800
CONTAINERD_SOCK=$KUBE_STATE/containerd/containerd.sock
# The second node (NODES=2 lab/kube/up; lab/kube/node2): a network namespace on the
# first node's link, with its own pod range, bridge, containerd, kubelet and kube-proxy.
NODES=${NODES:-1}
NODE2_NAME=nodens-node2
NODE2_NETNS=nodens-node2
NODE2_IP=172.31.255.2
NODE2_VETH=nodens-n2veth                         # the first node's end; eth0 in the namespace
NODE2_SVC_LINK=nodens-svc0                       # in the namespace: where Service IPs route
NODE2_CGROUP=nodens-node2                        # the second kubelet's cgroupRoot
POD_CIDR2=10.244.1.0/24
CNI_BRIDGE2=nodens-cni1
CONTAINERD2_SOCK=$KUBE_STATE/n2/containerd/containerd.sock

# Saved by up, restored by down (the kubelet, the CNI bridge and kube-proxy may set them).
SAVED_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.ipv4.conf.all.accept_redirects
  net.ipv4.conf.all.forwarding net.ipv4.conf.default.forwarding net.ipv6.conf.all.forwarding
  net.ipv6.conf.default.forwarding net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait"
# And the ones Cilium's agent writes (pkg/datapath/loader/base.go), with CNI=cilium.
CILIUM_SYSCTLS="net.core.bpf_jit_enable net.ipv4.conf.all.rp_filter net.ipv4.conf.default.rp_filter
  net.ipv4.fib_multipath_use_neigh kernel.timer_migration net.core.fb_tunnels_only_for_init_net
  net.ipv6.conf.all.disable_ipv6 net.ipv4.ip_local_reserved_ports"
# Paths outside KUBE_STATE that the cluster may create; down removes those that did not exist.
# (/run/cilium, /var/lib/cilium: Cilium's default state and library paths.)
SHARED_PATHS="/var/log/pods /var/log/containers /var/lib/cni /var/lib/kubelet /opt/containerd
  /etc/cni /run/containerd /var/lib/containerd /etc/kubernetes /run/cilium /var/lib/cilium"

# What nodens's node mode (installed on the cluster by its chart) adds to the node: down
# removes them too unless they were there before up.
NODENS_LINKS="nodelocaldns"
NODENS_CHAINS_RE='NODENS-(INPUT|OUTPUT|PREROUTING)'

# Netfilter accounting objects kube-proxy creates (deleted by down unless there before up).
KUBE_NFACCT="ct_state_invalid_dropped_pkts localhost_nps_accepted_pkts"

print_paths() {
  local v
  for v in K8S_VERSION HELM_VERSION NODENS_CACHE K8S_DIR HELM_DIR CRI_CLEAN IMAGES_DIR \
    COREDNS_BIN KUBE_STATE KUBE_ENV ETCD35; do
    printf '%s=%q\n' "$v" "${!v}"
  done
}
