package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// runPod creates a pod of c.Image running `sleep infinity` on the pod network (edit may
// change its spec), waits for it to run, and deletes it (gracefully, waiting until it is
// gone) when t ends. It logs how long the pod took to run.
func runPod(t *testing.T, c *C, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kubetest-" + hex.EncodeToString(b), Labels: map[string]string{"app.kubernetes.io/name": "kubetest"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: new(int64(1)),
			EnableServiceLinks:            new(false),
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "k",
				Image:           c.Image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "infinity"},
			}},
		},
	}
	if edit != nil {
		edit(pod)
	}
	pods := c.Client.CoreV1().Pods(c.Namespace)
	t0 := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() { deletePod(t, c, pod.Name) })
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			t.Logf("pod %s Running after %s on node %s, IP %s", p.Name, time.Since(t0).Round(time.Millisecond), p.Spec.NodeName, p.Status.PodIP)
			return p
		case corev1.PodFailed, corev1.PodSucceeded:
			t.Fatalf("pod %s ended: %s: %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		select {
		case <-ctx.Done():
			ev, _ := c.Kubectl(context.Background(), "-n", c.Namespace, "describe", "pod", p.Name)
			t.Fatalf("pod %s not Running: %s\n%s", p.Name, p.Status.Phase, ev)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deletePod deletes a pod gracefully and waits until it is gone.
func deletePod(t *testing.T, c *C, name string) {
	if c.gone.Load() {
		return // the cluster is down: nothing is left of the pod
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods(c.Namespace)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pod %s: %v", name, err)
		return
	}
	for {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("pod %s not gone after a minute", name)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// executor is an exec of argv in the pod's first container, with stdin, over transport
// "websocket", "spdy", or "fallback" (WebSocket first, SPDY when the upgrade fails, as
// kubectl does).
func executor(t *testing.T, c *C, pod string, transport string, argv ...string) remotecommand.Executor {
	t.Helper()
	req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.Namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Command: argv, Stdin: true, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	switch transport {
	case "websocket":
		return ws
	case "spdy":
		return spdy
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// echo is a python3 that echoes each line of stdin, then says "eof" at stdin's end.
const echo = `import sys
for line in sys.stdin:
    sys.stdout.write("echo:" + line); sys.stdout.flush()
print("eof")`

func TestExecRoundTripsLinesAndStdinEOF(t *testing.T) {
	c := Cluster(t)
	p := runPod(t, c, nil)
	for _, tr := range []string{"fallback", "websocket", "spdy"} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ex := executor(t, c, p.Name, tr, "python3", "-c", echo)
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			t0 := time.Now()
			go func() {
				err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: os.Stderr})
				outW.CloseWithError(fmt.Errorf("stream ended: %v", err))
				done <- err
			}()
			lines := make(chan string, 8)
			go func() {
				defer close(lines)
				buf := make([]byte, 0, 64)
				one := make([]byte, 1)
				for {
					if _, err := outR.Read(one); err != nil {
						return
					}
					buf = append(buf, one[0])
					if one[0] == '\n' {
						lines <- string(buf)
						buf = buf[:0]
					}
				}
			}()
			expect := func(want string) {
				t.Helper()
				select {
				case got, ok := <-lines:
					if !ok {
						t.Fatalf("stdout ended before %q: %v", want, <-done)
					}
					if got != want {
						t.Fatalf("stdout line %q, want %q", got, want)
					}
				case <-ctx.Done():
					t.Fatalf("no %q on stdout: %v", want, ctx.Err())
				}
			}
			for i, l := range []string{"hello " + tr + "\n", "second line\n"} {
				t1 := time.Now()
				if _, err := io.WriteString(inW, l); err != nil {
					t.Fatal(err)
				}
				expect("echo:" + l)
				if i == 0 {
					t.Logf("%s: exec set-up and first line %s", tr, time.Since(t0).Round(time.Millisecond))
				} else {
					t.Logf("%s: line round trip %s", tr, time.Since(t1).Round(time.Millisecond))
				}
			}
			inW.Close() // the remote python3 sees EOF on stdin
			expect("eof\n")
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("exec: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("exec did not end after stdin's EOF")
			}
		})
	}
}

func TestContainerdHasPauseAndKernelImages(t *testing.T) {
	c := Cluster(t)
	out, err := exec.Command("ctr", "-a", filepath.Join(c.Dir, "containerd", "containerd.sock"), "-n", "k8s.io", "images", "ls", "-q").Output()
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(out))
	for _, want := range []string{c.Pause, c.Image} {
		if !slices.Contains(names, want) {
			t.Errorf("the cluster's containerd has no %s: %q", want, names)
		}
	}
}

func TestKubectlUsesTheCluster(t *testing.T) {
	c := Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Kubectl(ctx, "get", "serviceaccount", "default", "-n", c.Namespace, "-o", "jsonpath={.metadata.name}")
	if err != nil || out != "default" {
		t.Fatalf("kubectl get serviceaccount: %q, %v", out, err)
	}
	if _, err := c.Kubectl(ctx, "get", "pod", "no-such-pod", "-n", c.Namespace); err == nil {
		t.Fatal("kubectl get of a missing pod succeeded")
	}
}
