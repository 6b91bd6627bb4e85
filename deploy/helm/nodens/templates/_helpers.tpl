{{- define "nodens.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodens.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "nodens.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "nodens.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nodens.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodens.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nodens.labels" -}}
{{ include "nodens.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- range $key, $value := .Values.commonLabels }}
{{- if has $key (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "helm.sh/chart") }}
{{- fail (printf "commonLabels: %s is a label the chart sets itself" $key) }}
{{- end }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* A value of the values file as TOML: strings, numbers and booleans as
     JSON writes them (TOML reads them alike), lists and maps inline. */}}
{{- define "nodens.tomlValue" -}}
{{- if kindIs "map" . -}}
{ {{- $first := true -}}{{- range $k, $v := . -}}{{- if not $first }}, {{ end -}}{{- $first = false -}}{{ $k }} = {{ include "nodens.tomlValue" $v }}{{- end -}} }
{{- else if kindIs "slice" . -}}
[{{- range $i, $v := . -}}{{- if $i }}, {{ end -}}{{ include "nodens.tomlValue" $v }}{{- end -}}]
{{- else -}}
{{- toJson . -}}
{{- end -}}
{{- end -}}

{{/* The keys of server.extra or cache.extra, in their TOML section. Takes
     (list "server" MAP CHART_KEYS): CHART_KEYS maps each key the chart
     writes itself to the value that sets it, refused here. */}}
{{- define "nodens.extraKeys" -}}
{{- $section := index . 0 -}}{{- $chart := index . 2 -}}
{{- range $key, $value := index . 1 }}
{{- with get $chart $key }}
{{- fail (printf "%s.extra.%s: the chart writes [%s] %s itself, from %s: set that instead" $section $key $section $key .) }}
{{- end }}
{{ $key }} = {{ include "nodens.tomlValue" $value }}
{{- end }}
{{- end -}}

{{- define "nodens.image" -}}
{{- $repository := required "image.repository is required: the nodens image in your registry, e.g. --set image.repository=registry.example.com/nodens (push the image deploy/image/build makes there; no public registry publishes nodens)" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail (printf "image.digest %q is not a digest: sha256: and 64 hex digits, as deploy/supply-chain/verify prints it" .Values.image.digest) -}}
{{- end -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* An address and a port as nodens writes them: IP:port or [IPv6]:port. */}}
{{- define "nodens.hostPort" -}}
{{- $ip := index . 0 -}}{{- $port := index . 1 -}}
{{- if contains ":" $ip -}}[{{ $ip }}]:{{ $port }}{{- else -}}{{ $ip }}:{{ $port }}{{- end -}}
{{- end -}}

{{/* The environment variable prefix Kubernetes derives from a Service name. */}}
{{- define "nodens.upstreamEnv" -}}
{{- .Values.upstream.service.name | upper | replace "-" "_" -}}
{{- end -}}

{{/* Whether nodens runs on the pod network (values: network). */}}
{{- define "nodens.podNetwork" -}}
{{- if eq .Values.network "pod" -}}true
{{- else if ne .Values.network "host" -}}{{- fail (printf "network must be host or pod, not %q" .Values.network) -}}
{{- end -}}
{{- end -}}

{{/* The cluster DNS Service IP(s), as a JSON list: clusterDns.ips, or when
     that is empty the clusterIPs of the Service clusterDns.service, looked
     up at install (empty with helm template, which has no cluster). */}}
{{- define "nodens.clusterDnsIps" -}}
{{- $ips := .Values.clusterDns.ips | default list -}}
{{- if not $ips -}}
{{- with .Values.clusterDns.service -}}
{{- $svc := lookup "v1" "Service" (.namespace | default "kube-system") (.name | default "kube-dns") -}}
{{- if $svc -}}
{{- range ($svc.spec.clusterIPs | default (list $svc.spec.clusterIP)) -}}
{{- if and . (ne . "None") -}}{{- $ips = append $ips . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $ips -}}
{{- end -}}

{{/* The ranges nodens answers when [server] allow is unset
     (src/admission/acl.rs, docs/configuration.md#server). */}}
{{- define "nodens.defaultAllow" -}}
["127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "::1/128", "fc00::/7", "fe80::/10"]
{{- end -}}

{{/* "true" when the CIDR given lies within nodens.defaultAllow. IPv6 by its
     first group written in full (fd00::/64, not fd::/64): a range missed
     here is only listed twice. */}}
{{- define "nodens.inDefaultAllow" -}}
{{- $parts := splitList "/" . -}}
{{- $len := index $parts 1 | default "0" | int -}}
{{- $ip := index $parts 0 | lower -}}
{{- if contains ":" $ip -}}
{{- $h := splitList ":" $ip | first -}}
{{- if and (eq (len $h) 4) (or (hasPrefix "fc" $h) (hasPrefix "fd" $h)) (ge $len 7) -}}true
{{- else if and (eq (len $h) 4) (has (substr 0 3 $h) (list "fe8" "fe9" "fea" "feb")) (ge $len 10) -}}true
{{- end -}}
{{- else -}}
{{- $o := splitList "." $ip -}}
{{- $a := index $o 0 | int -}}{{- $b := index $o 1 | int -}}
{{- if or (and (has $a (list 10 127)) (ge $len 8)) (and (eq $a 172) (ge $b 16) (le $b 31) (ge $len 12)) (and (eq $a 192) (eq $b 168) (ge $len 16)) (and (eq $a 100) (ge $b 64) (le $b 127) (ge $len 10)) (and (eq $a 169) (eq $b 254) (ge $len 16)) -}}true
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The nodes' pod ranges (spec.podCIDRs, looked up at install; none with
     helm template) that nodens's default ranges do not cover, a JSON list. */}}
{{- define "nodens.podCidrs" -}}
{{- $out := list -}}
{{- range (lookup "v1" "Node" "" "").items | default list -}}
{{- range .spec.podCIDRs | default (compact (list .spec.podCIDR)) -}}
{{- if and (contains "/" .) (not (include "nodens.inDefaultAllow" .)) -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $out | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* The addresses nodens listens on, port 53: on the pod network every
     address of the pod (the redirect sends DNS to its IP). */}}
{{- define "nodens.listen" -}}
{{- if include "nodens.podNetwork" . -}}
{{- $out := list "0.0.0.0:53" -}}
{{- range concat .Values.localAddresses (include "nodens.clusterDnsIps" . | fromJsonArray) -}}{{- if contains ":" . -}}{{- $out = list "0.0.0.0:53" "[::]:53" -}}{{- end -}}{{- end -}}
{{- toJson $out -}}
{{- else -}}
{{- include "nodens.hostListen" . -}}
{{- end -}}
{{- end -}}

{{/* On the node's network: localAddresses, and clusterDns.ips when nodens
     holds them too. */}}
{{- define "nodens.hostListen" -}}
{{- $out := list -}}
{{- range .Values.localAddresses -}}{{- $out = append $out (include "nodens.hostPort" (list . 53)) -}}{{- end -}}
{{- if .Values.clusterDns.listen -}}
{{- $ips := include "nodens.clusterDnsIps" . | fromJsonArray -}}
{{- if not $ips -}}
{{- $svc := printf "%s/%s" .Values.clusterDns.service.namespace .Values.clusterDns.service.name -}}
{{- fail (printf "clusterDns.ips is empty and the Service %s was not found to take its IPs from (helm template has no cluster to look it up in): set clusterDns.ips to the cluster DNS Service IP(s), the kubelet's clusterDNS (kubectl -n %s get svc %s -o jsonpath='{.spec.clusterIPs}'), or clusterDns.service.namespace and .name to that Service; or set clusterDns.listen=false" $svc .Values.clusterDns.service.namespace .Values.clusterDns.service.name) -}}
{{- end -}}
{{- range $ips -}}{{- $out = append $out (include "nodens.hostPort" (list . 53)) -}}{{- end -}}
{{- end -}}
{{- if not $out -}}{{- fail "no address to listen on: set localAddresses or clusterDns.ips" -}}{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* One [[zone]] forwarding to the cluster DNS through the upstream Service
(or, with upstream.endpointSlices, to its pods). Takes (list ZONE $). */}}
{{- define "nodens.clusterZone" -}}
{{- $root := index . 1 }}
{{- $v := $root.Values }}
[[zone]]
name = {{ index . 0 | toJson }}
upstream_service = {{ $v.upstream.service.name | toJson }}
{{- if $v.upstream.endpointSlices }}
endpoints = { service = {{ $v.upstream.service.name | toJson }}, namespace = {{ $root.Release.Namespace | toJson }}, port = "dns"{{ if ne ($v.upstream.endpointsTopology | default "auto") "auto" }}, topology = {{ $v.upstream.endpointsTopology | toJson }}{{ end }} }
{{- end }}
transport = {{ $v.upstream.transport | toJson }}
upstream_timeout = {{ $v.upstream.timeout | toJson }}
{{- with $v.upstream.maxTtl }}
max_ttl = {{ . | toJson }}
{{- end }}
{{- with $v.upstream.negativeMaxTtl }}
negative_max_ttl = {{ . | toJson }}
{{- end }}
{{- if $v.search.noAaaaForIpv4Pods }}
no_aaaa_for_ipv4_pods = true
{{- end }}
{{- with $v.upstream.pool }}

[zone.pool]
{{- range $key, $value := . }}
{{ $key }} = {{ toJson $value }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The nodens.toml the chart generates (docs/configuration.md). */}}
{{- define "nodens.config" -}}
{{- if .Values.configOverride -}}
{{- if or .Values.server.extra .Values.cache.extra -}}
{{- fail "server.extra and cache.extra go into the generated nodens.toml, which configOverride replaces: put those keys in the configOverride file" -}}
{{- end -}}
{{ .Values.configOverride }}
{{- else -}}
# Generated by the nodens Helm chart; docs/configuration.md explains each option.
[server]
listen = {{ include "nodens.listen" . }}
workers = {{ .Values.server.workers | int }}
shutdown_grace = {{ .Values.server.shutdownGrace | toJson }}
{{- with .Values.server.lameduck | default (ternary "5s" "" (eq .Values.network "pod")) }}
lameduck = {{ . | toJson }}
{{- end }}
{{- with .Values.server.allow }}
allow = {{ toJson . }}
{{- else }}
{{- with include "nodens.podCidrs" . | fromJsonArray }}
# nodens's default ranges and the nodes' pod ranges outside them (their
# spec.podCIDRs when this was installed or upgraded: server.allow).
allow = {{ concat (include "nodens.defaultAllow" $ | fromJsonArray) . | toJson }}
{{- end }}
{{- end }}
{{- if and .Values.handover.enabled (not (include "nodens.podNetwork" .)) }}
handover_socket = "/run/nodens/handover.sock"
{{- end }}
{{- if .Values.server.controlSocket }}
control_socket = "/run/nodens/control.sock"
{{- end }}
{{- if .Values.server.workloadCounters }}
workload_counters = true
{{- if .Values.server.workloadMetrics }}
workload_metrics = true
{{- end }}
{{- end }}
{{- with .Values.server.runAsUser }}
run_as_user = {{ . | int }}
run_as_group = {{ $.Values.server.runAsGroup | default . | int }}
{{- end }}
{{- include "nodens.extraKeys" (list "server" .Values.server.extra (dict "listen" "localAddresses and clusterDns" "workers" "server.workers" "shutdown_grace" "server.shutdownGrace" "lameduck" "server.lameduck" "allow" "server.allow" "handover_socket" "handover.enabled" "control_socket" "server.controlSocket" "workload_counters" "server.workloadCounters" "workload_metrics" "server.workloadMetrics" "run_as_user" "server.runAsUser" "run_as_group" "server.runAsGroup")) }}

[cache]
capacity = {{ .Values.cache.capacity | toJson }}
stale_max_age = {{ .Values.cache.staleMaxAge | toJson }}
prefetch_min_hits = {{ .Values.cache.prefetchMinHits | int }}
{{- if .Values.cache.snapshotDir }}
snapshot_file = "/var/lib/nodens/cache.snap"
snapshot_interval = {{ .Values.cache.snapshotInterval | toJson }}
{{- end }}
{{- include "nodens.extraKeys" (list "cache" .Values.cache.extra (dict "capacity" "cache.capacity" "stale_max_age" "cache.staleMaxAge" "prefetch_min_hits" "cache.prefetchMinHits" "snapshot_file" "cache.snapshotDir" "snapshot_interval" "cache.snapshotInterval")) }}

[metrics]
{{- if and (eq .Values.metrics.address "hostIP") (include "nodens.podNetwork" .) }}
# NODENS_METRICS_LISTEN (the pod's IP, status.podIP) replaces this address in
# each pod; the port stays.
listen = {{ include "nodens.hostPort" (list "127.0.0.1" .Values.metrics.port) | toJson }}
{{- else if eq .Values.metrics.address "hostIP" }}
# NODENS_METRICS_LISTEN (the node's IP, status.hostIP) replaces this address
# on each node; the port stays.
listen = {{ include "nodens.hostPort" (list "127.0.0.1" .Values.metrics.port) | toJson }}
{{- else }}
listen = {{ include "nodens.hostPort" (list .Values.metrics.address .Values.metrics.port) | toJson }}
{{- end }}
{{- if eq .Values.metrics.probes "http" }}
{{- if include "nodens.podNetwork" . }}
# The kubelet probes a pod at its IP.
probe_listen = {{ include "nodens.hostPort" (list "0.0.0.0" .Values.metrics.probePort) | toJson }}
{{- else }}
probe_listen = {{ include "nodens.hostPort" (list "127.0.0.1" .Values.metrics.probePort) | toJson }}
{{- end }}
{{- end }}
max_connections = {{ .Values.metrics.maxConnections | int }}
header_timeout = {{ .Values.metrics.headerTimeout | toJson }}

[log]
level = {{ .Values.log.level | toJson }}
format = {{ .Values.log.format | toJson }}
{{- if not (include "nodens.podNetwork" .) }}

[node]
setup = true
interface = {{ .Values.node.interface | toJson }}
backend = {{ .Values.node.backend | toJson }}
reconcile_interval = {{ .Values.node.reconcileInterval | toJson }}
state_dir = "/run/nodens"
{{- end }}

{{- if or .Values.upstream.kubeDnsConfigMap .Values.startupTaint.enabled }}

[kubernetes]
{{- if .Values.upstream.kubeDnsConfigMap }}
# The kube-dns ConfigMap (upstream.kubeDnsConfigMap), mounted here.
kube_dns_config = "/etc/kube-dns"
{{- end }}
{{- if .Values.startupTaint.enabled }}
# Removed from this node ($NODE_NAME) once nodens serves (startupTaint).
startup_taint = {{ .Values.startupTaint.key | toJson }}
{{- end }}
{{- end }}

[cluster]
domain = {{ .Values.clusterDomain | toJson }}
local_nxdomain = {{ .Values.search.localNxdomain }}
nxdomain_cut = {{ .Values.search.nxdomainCut }}
namespace_check = {{ .Values.search.namespaceCheck }}
speculate = {{ .Values.search.speculate }}
{{- if .Values.search.namespacesFromApi }}
namespaces_from_api = true
{{- end }}
{{- with .Values.search.nodeSearchDomains }}
search_domains = {{ toJson . }}
{{- else }}
{{- if .Values.search.autopath }}
# dnsPolicy Default: the kubelet's resolv.conf, whose search domains it
# appends to every pod's search list.
search_domains_from = "/etc/resolv.conf"
{{- end }}
{{- end }}
{{- if .Values.search.autopath }}
autopath = true
{{- end }}
{{- if and .Values.search.holdPastTtl (not .Values.search.followApi) }}
{{- fail "search.holdPastTtl needs search.followApi: answers are held only while the watch is current" }}
{{- end }}
{{- if .Values.search.followApi }}
follow_api = true
{{- with .Values.search.holdPastTtl }}
hold_past_ttl = {{ toJson . }}
{{- end }}
{{- if ne (.Values.search.followApiEndpoints | default "headless") "headless" }}
follow_api_endpoints = {{ toJson .Values.search.followApiEndpoints }}
{{- end }}
{{- if eq (toString .Values.search.keepLastGood) "false" }}
keep_last_good = false
{{- end }}
{{- end }}
{{- with .Values.search.exceptions }}
exceptions = {{ toJson . }}
{{- end }}
{{- with .Values.search.disableRules }}
disable_rules = {{ toJson . }}
{{- end }}
{{- range .Values.search.cloudSuffixes }}

[[cluster.cloud_suffix]]
suffix = {{ .suffix | toJson }}
max_labels = {{ .maxLabels | int }}
{{- end }}
{{ include "nodens.clusterZone" (list .Values.clusterDomain $) }}
{{- range .Values.upstream.reverseZones }}
{{ include "nodens.clusterZone" (list . $) }}
{{- end }}
{{- if eq .Values.upstream.external "clusterDns" }}
{{- if and .Values.upstream.kubeDnsConfigMap .Values.upstream.endpointSlices }}
{{- fail "upstream.kubeDnsConfigMap with upstream.endpointSlices needs upstream.external resolvConf: the ConfigMap's upstreamNameservers are the \".\" zone's upstreams, which the cluster DNS pods from the EndpointSlices would replace" }}
{{- end }}
{{ include "nodens.clusterZone" (list "." $) }}
{{- else if eq .Values.upstream.external "resolvConf" }}

[[zone]]
name = "."
resolv_conf = {{ .Values.upstream.resolvConf | toJson }}
{{- if .Values.search.noAaaaForIpv4Pods }}
no_aaaa_for_ipv4_pods = true
{{- end }}
{{- else }}
{{- fail (printf "upstream.external must be resolvConf or clusterDns, not %q" .Values.upstream.external) }}
{{- end }}
{{- with .Values.extraConfig }}

{{ . }}
{{- end }}
{{- end }}
{{- end -}}
