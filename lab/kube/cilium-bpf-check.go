// cilium-bpf-check: loads Cilium's compiled BPF objects into this kernel, as the agent
// does with github.com/cilium/ebpf (maps are not pinned, so nothing stays behind), and
// reports the verifier's verdict; with -cgroup DIR it attaches the cgroup/* programs of an
// object to a cgroup2 directory, with -svc it writes one service into the object's own
// load-balancer maps, and with -hold it runs a command inside DIR while attached.
// Built and run by `lab/kube/cilium-build bpf-check`.
//
//	cilium-bpf-check bpf_lxc.o bpf_host.o ...
//	cilium-bpf-check -svc 127.1.2.3:53=127.0.0.1:39153 -cgroup /mnt/cg2/test \
//	    -hold 'python3 client.py 127.1.2.3 53' bpf_sock.o
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

func main() {
	cg := flag.String("cgroup", "", "cgroup2 directory to attach cgroup programs to")
	hold := flag.String("hold", "", "after attaching, run this shell command and report its exit")
	svc := flag.String("svc", "", "VIP:PORT=BACKEND:PORT: one service with one backend in the object's own LB maps")
	lrp := flag.Bool("lrp", false, "make the -svc service a LocalRedirect one (flags2 SVC_FLAG_LOCALREDIRECT), as a CiliumLocalRedirectPolicy does")
	skip := flag.Bool("skip", false, "with -lrp: an entry in cilium_skip_lb4 for this network namespace and the service, as skipRedirectFromBackend makes for the backend pod's")
	flag.Parse()
	bad := 0
	for _, obj := range flag.Args() {
		spec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			fmt.Printf("%s: spec: %v\n", obj, err)
			bad++
			continue
		}
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
		names := make([]string, 0, len(spec.Programs))
		for n := range spec.Programs {
			names = append(names, n)
		}
		sort.Strings(names)
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
			Programs: ebpf.ProgramOptions{LogSizeStart: 1 << 20},
		})
		if err != nil {
			var ve *ebpf.VerifierError
			if errors.As(err, &ve) {
				l := ve.Log
				if len(l) > 15 {
					l = l[len(l)-15:]
				}
				fmt.Printf("%s: LOAD FAILED: %v\n  %s\n", obj, err, strings.Join(l, "\n  "))
			} else {
				fmt.Printf("%s: LOAD FAILED: %v\n", obj, err)
			}
			bad++
			continue
		}
		insns := 0
		for _, n := range names {
			if p := coll.Programs[n]; p != nil {
				if info, err := p.Info(); err == nil {
					if ins, err := info.Instructions(); err == nil {
						insns += len(ins)
					}
				}
			}
		}
		fmt.Printf("%s: loaded %d programs, %d maps, %d translated instructions\n", obj, len(coll.Programs), len(coll.Maps), insns)
		if *svc != "" {
			if err := addService(coll, *svc, *lrp); err != nil {
				fmt.Printf("  service %s: FAILED: %v\n", *svc, err)
				bad++
			} else {
				kind := "ClusterIP-like"
				if *lrp {
					kind = "LocalRedirect"
				}
				fmt.Printf("  %s service %s in cilium_lb4_services_v2 / cilium_lb4_backends_v3\n", kind, *svc)
			}
			if *skip {
				if cookie, err := addSkip(coll, *svc); err != nil {
					fmt.Printf("  skip entry: FAILED: %v\n", err)
					bad++
				} else {
					fmt.Printf("  cilium_skip_lb4: netns cookie %d, service %s\n", cookie, strings.SplitN(*svc, "=", 2)[0])
				}
			}
		}
		if *cg != "" {
			var links []link.Link
			for _, n := range names {
				ps := spec.Programs[n]
				if ps.Type != ebpf.CGroupSockAddr && ps.Type != ebpf.CGroupSock {
					continue
				}
				l, err := link.AttachCgroup(link.CgroupOptions{Path: *cg, Attach: ps.AttachType, Program: coll.Programs[n]})
				if err != nil {
					fmt.Printf("  attach %s (%s) to %s: FAILED: %v\n", n, ps.AttachType, *cg, err)
					bad++
					continue
				}
				fmt.Printf("  attached %s (%s) to %s\n", n, ps.AttachType, *cg)
				links = append(links, l)
			}
			if *hold != "" {
				fmt.Printf("  running %q in %s\n", *hold, *cg)
				rc := runIn(*cg, *hold)
				fmt.Printf("  exit %d\n", rc)
				if rc != 0 {
					bad++
				}
			}
			for _, l := range links {
				l.Close()
			}
		}
		coll.Close()
	}
	if bad > 0 {
		os.Exit(1)
	}
}

// addService writes one service (rev-NAT index 1; no flags, or with lrp flags2
// SVC_FLAG_LOCALREDIRECT) with one backend (ID 1) into the collection's
// cilium_lb4_services_v2 and cilium_lb4_backends_v3, in the layouts of bpf/lib/common.h
// (struct lb4_key, lb4_service, lb4_backend). Protocol 0 (any) and scope 0 (external).
func addService(coll *ebpf.Collection, spec string, lrp bool) error {
	vip, be, ok := strings.Cut(spec, "=")
	if !ok {
		return fmt.Errorf("want VIP:PORT=BACKEND:PORT")
	}
	v, err := netip.ParseAddrPort(vip)
	if err != nil {
		return err
	}
	b, err := netip.ParseAddrPort(be)
	if err != nil {
		return err
	}
	svcs, backends := coll.Maps["cilium_lb4_services_v2"], coll.Maps["cilium_lb4_backends_v3"]
	if svcs == nil || backends == nil {
		return fmt.Errorf("maps not in object")
	}
	key := func(slot uint16) []byte {
		k := make([]byte, svcs.KeySize())
		a := v.Addr().As4()
		copy(k[0:4], a[:])
		binary.BigEndian.PutUint16(k[4:6], v.Port())
		binary.LittleEndian.PutUint16(k[6:8], slot)
		return k // proto 0 (any), scope 0 (external)
	}
	master := make([]byte, svcs.ValueSize())
	binary.LittleEndian.PutUint16(master[4:6], 1) // count
	binary.LittleEndian.PutUint16(master[6:8], 1) // rev_nat_index
	if lrp {
		master[9] = 1 << 0 // flags2: SVC_FLAG_LOCALREDIRECT
	}
	if err := svcs.Put(key(0), master); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	slot := make([]byte, svcs.ValueSize())
	binary.LittleEndian.PutUint32(slot[0:4], 1) // backend_id
	binary.LittleEndian.PutUint16(slot[6:8], 1)
	if err := svcs.Put(key(1), slot); err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	bv := make([]byte, backends.ValueSize())
	a := b.Addr().As4()
	copy(bv[0:4], a[:])
	binary.BigEndian.PutUint16(bv[4:6], b.Port())
	id := make([]byte, backends.KeySize())
	binary.LittleEndian.PutUint32(id, 1)
	if err := backends.Put(id, bv); err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	return nil
}

// runIn runs sh -c cmd with the child moved into cgroup dir cg first (via a wrapper shell).
func runIn(cg, cmd string) int {
	c := exec.Command("sh", "-c", "echo $$ > "+cg+"/cgroup.procs && exec sh -c "+strconv.Quote(cmd))
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 255
	}
	return 0
}

// addSkip writes the entry skipRedirectFromBackend makes for a backend pod: this process's
// network namespace cookie (SO_NETNS_COOKIE, Linux 5.12) with the service's address and
// port (struct skip_lb4_key), into cilium_skip_lb4. bpf_sock then leaves connections from
// this network namespace to that LocalRedirect service untranslated.
func addSkip(coll *ebpf.Collection, spec string) (uint64, error) {
	vip, _, _ := strings.Cut(spec, "=")
	v, err := netip.ParseAddrPort(vip)
	if err != nil {
		return 0, err
	}
	m := coll.Maps["cilium_skip_lb4"]
	if m == nil {
		return 0, fmt.Errorf("cilium_skip_lb4 not in object (built without ENABLE_LOCAL_REDIRECT_POLICY?)")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_NETNS_COOKIE: %w", err)
	}
	k := make([]byte, m.KeySize())
	binary.LittleEndian.PutUint64(k[0:8], cookie)
	a := v.Addr().As4()
	copy(k[8:12], a[:])
	binary.BigEndian.PutUint16(k[12:14], v.Port())
	val := make([]byte, m.ValueSize())
	val[0] = 1
	return cookie, m.Put(k, val)
}
