// cri-clean stops and removes every pod sandbox (and so its containers) on a CRI socket:
// lab/kube/down runs it before stopping containerd, so no shim, mount or netns is left.
//
//	cri-clean unix:///run/nodens-kube/containerd/containerd.sock
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cri-clean unix:///path/to/cri.sock")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-clean:", err)
		os.Exit(1)
	}
	defer conn.Close()
	rt := runtime.NewRuntimeServiceClient(conn)
	pods, err := rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-clean: list:", err)
		os.Exit(1)
	}
	failed := 0
	for _, p := range pods.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			fmt.Fprintln(os.Stderr, "cri-clean: stop", p.Metadata.GetName(), err)
			failed++
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			fmt.Fprintln(os.Stderr, "cri-clean: remove", p.Metadata.GetName(), err)
			failed++
		}
	}
	fmt.Printf("cri-clean: %d pod sandboxes removed\n", len(pods.Items)-failed/2)
	if failed > 0 {
		os.Exit(1)
	}
}
