// cilium-reqcheck: runs, on this kernel, the checks cilium-agent makes before it sets up
// its BPF datapath (linux.CheckRequirements, which the agent treats as fatal), the probes
// that choose its datapath modes (tcx or tc, netkit, BPF ISA, managed neighbours), and,
// given a directory, writes the feature headers the agent writes into
// <bpf-dir>/include/bpf (probes.ExecuteHeaderProbes) so that the BPF programs can be
// compiled as the agent would on this node. Built inside the Cilium wrapper module (same
// code as the agent) and run by `lab/kube/cilium-build bpf-check`. Nothing is attached and
// nothing stays behind.
//
//	cilium-reqcheck [HEADER-DIR]
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/cilium/cilium/pkg/datapath/linux"
	"github.com/cilium/cilium/pkg/datapath/linux/probes"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rc := 0
	if err := linux.CheckRequirements(logger); err != nil {
		fmt.Printf("FAIL agent requirements (linux.CheckRequirements): %v\n", err)
		rc = 1
	} else {
		fmt.Println("PASS agent requirements (linux.CheckRequirements: bpf(), JIT, tc/tcx, helpers up to bpf_redirect_peer)")
	}
	info := func(what string, err error) {
		if err != nil {
			fmt.Printf("info %s: no (%v)\n", what, err)
		} else {
			fmt.Printf("info %s: yes\n", what)
		}
	}
	info("tcx links (the agent attaches with tcx when present)", probes.HaveTCX())
	info("tc bpf (clsact)", probes.HaveTCBPF())
	info("netkit", probes.HaveNetkit())
	info("BPF ISA v3 (-mcpu=v3)", probes.HaveV3ISA(logger))
	info("managed neighbours", probes.HaveManagedNeighbors())
	if len(os.Args) > 1 {
		p := probes.ExecuteHeaderProbes(logger)
		if p == nil {
			fmt.Println("FAIL feature probes: none")
			rc = 1
		} else if err := probes.CreateHeaderFiles(os.Args[1], p); err != nil {
			fmt.Printf("FAIL feature headers: %v\n", err)
			rc = 1
		} else {
			fmt.Printf("PASS feature headers written to %s (features.h, features_skb.h, features_xdp.h)\n", os.Args[1])
		}
	}
	os.Exit(rc)
}
