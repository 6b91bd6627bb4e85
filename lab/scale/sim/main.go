// Command scalesim drives the scale lab's cluster (lab/scale/run): it writes
// the objects a cluster of many nodes has (Nodes, Services, pods bound to
// the nodes with the status a kubelet would write), rolls Deployments'
// worth of pods over, and runs many kube-proxy-like watchers.
//
//	scalesim populate -nodes N -services S -pods P
//	scalesim churn -services K            (replaces every pod of K Services)
//	scalesim informers -count W           (W kube-proxy-like watchers)
//
// The EndpointSlices come from kube-controller-manager's own controller, as
// in a real cluster. Every client reads the kubeconfig in $KUBECONFIG.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const namespace = "scale"

func config(protobuf bool) *rest.Config {
	c, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fail(err)
	}
	c.QPS, c.Burst = 500, 1000
	if protobuf {
		// kube-proxy's client: protobuf, JSON accepted.
		c.ContentType = "application/vnd.kubernetes.protobuf"
		c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	return c
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scalesim:", err)
	os.Exit(1)
}

// parallel runs f(0..n-1) on `workers` goroutines, failing on the first error.
func parallel(n, workers int, f func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		fail(err)
	}
}

func podIP(generation, service, replica int) string {
	// 10.128.0.0/9: generation in the second octet's low bits.
	n := (generation%64)<<17 | service<<5 | replica
	return fmt.Sprintf("10.%d.%d.%d", 128+(n>>16)&127, (n>>8)&255, n&255)
}

// createPod creates a pod of Service s bound to a node, then writes the
// status a kubelet would: Running, Ready, with its IP.
func createPod(ctx context.Context, cs *kubernetes.Clientset, nodes, generation, s, r int) error {
	name := fmt.Sprintf("svc-%d-g%d-%d", s, generation, r)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{"app": fmt.Sprintf("svc-%d", s)}},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("node-%d", (s*31+r)%nodes),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	created, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	ip := podIP(generation, s, r)
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "172.31.0.1", PodIP: ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	_, err = cs.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

func populate(args []string) {
	fs := flag.NewFlagSet("populate", flag.ExitOnError)
	nodes := fs.Int("nodes", 500, "Node objects")
	services := fs.Int("services", 1000, "Services, each selecting its pods")
	pods := fs.Int("pods", 10, "pods per Service")
	headless := fs.Int("headless-every", 10, "every Nth Service is headless")
	_ = fs.Parse(args)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(config(true))
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil {
		fail(err)
	}
	start := time.Now()
	parallel(*nodes, 16, func(i int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
			Labels: map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}}}
		_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	parallel(*services, 16, func(s int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", s), Namespace: namespace},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": fmt.Sprintf("svc-%d", s)},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if *headless > 0 && s%*headless == 0 {
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		}
		_, err := cs.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
		return err
	})
	parallel(*services**pods, 32, func(i int) error {
		return createPod(ctx, cs, *nodes, 0, i / *pods, i%*pods)
	})
	fmt.Printf("populated %d nodes, %d services, %d pods in %.1fs\n", *nodes, *services, *services**pods, time.Since(start).Seconds())
}

// churn replaces every pod of the first `services` Services (a rollout):
// new pods at new addresses, then the old ones deleted.
func churn(args []string) {
	fs := flag.NewFlagSet("churn", flag.ExitOnError)
	nodes := fs.Int("nodes", 500, "Node objects (as populated)")
	services := fs.Int("services", 50, "Services rolled")
	pods := fs.Int("pods", 10, "pods per Service (as populated)")
	generation := fs.Int("generation", 1, "this rollout's number (a new one each time)")
	_ = fs.Parse(args)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(config(true))
	start := time.Now()
	parallel(*services**pods, 16, func(i int) error {
		s, r := i / *pods, i%*pods
		if err := createPod(ctx, cs, *nodes, *generation, s, r); err != nil {
			return err
		}
		old := fmt.Sprintf("svc-%d-g%d-%d", s, *generation-1, r)
		zero := int64(0)
		return cs.CoreV1().Pods(namespace).Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	fmt.Printf("rolled %d services (%d pods) in %.1fs\n", *services, *services**pods, time.Since(start).Seconds())
}

// informers runs `count` watchers that read what kube-proxy reads, as it
// reads it: a shared informer factory over Services and EndpointSlices with
// kube-proxy's label selectors, protobuf, each with a client (and so a
// connection) of its own, as each node's kube-proxy has.
func runInformers(args []string) {
	fs := flag.NewFlagSet("informers", flag.ExitOnError)
	count := fs.Int("count", 100, "watchers")
	_ = fs.Parse(args)
	noProxyName, _ := labels.NewRequirement("service.kubernetes.io/service-proxy-name", selection.DoesNotExist, nil)
	noHeadless, _ := labels.NewRequirement("service.kubernetes.io/headless", selection.DoesNotExist, nil)
	selector := labels.NewSelector().Add(*noProxyName, *noHeadless).String()
	var synced atomic.Int64
	for i := 0; i < *count; i++ {
		c := config(true)
		c.QPS, c.Burst = 5, 10 // kube-proxy's defaults
		cs := kubernetes.NewForConfigOrDie(c)
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		svc := factory.Core().V1().Services().Informer()
		eps := factory.Discovery().V1().EndpointSlices().Informer()
		for _, inf := range []cache.SharedIndexInformer{svc, eps} {
			_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: func(any) {}, UpdateFunc: func(any, any) {}, DeleteFunc: func(any) {},
			})
		}
		stop := make(chan struct{})
		factory.Start(stop)
		go func() {
			if cache.WaitForCacheSync(stop, svc.HasSynced, eps.HasSynced) {
				synced.Add(1)
			}
		}()
	}
	for {
		fmt.Printf("synced %d\n", synced.Load())
		time.Sleep(time.Second)
	}
}

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: scalesim populate|churn|informers [flags]"))
	}
	switch os.Args[1] {
	case "populate":
		populate(os.Args[2:])
	case "churn":
		churn(os.Args[2:])
	case "informers":
		runInformers(os.Args[2:])
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}
