package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// execURL is the exec subresource of pod's Container running argv with stdin and stdout
// attached (and stderr when asked).
func (c *Client) execURL(namespace, pod string, argv []string, stderr bool) *url.URL {
	return c.clientset.CoreV1().RESTClient().Post().
		Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: Container,
			Command:   argv,
			Stdin:     true,
			Stdout:    true,
			Stderr:    stderr,
		}, scheme.ParameterCodec).URL()
}

// executor is the exec's stream, as kubectl makes it: WebSocket (the v5 subprotocol, which
// carries stdin's end as a CLOSE) first, SPDY when the server does not upgrade to it.
func (c *Client) executor(u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(c.config, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("spdy executor: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(c.config, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("websocket executor: %w", err)
	}
	switch c.only {
	case "spdy":
		return spdy, nil
	case "websocket":
		return ws, nil
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// execStream is one command running as an exec in a pod, its stdio carried by one exec
// stream through the API server: Write writes the command's stdin, Read reads its stdout
// (net.Pipe ends, so deadlines apply and can be set again), stderr goes to the writer it
// was made with. It is a kernelstart.Proc.
type execStream struct {
	stdin  net.Conn // ours: Write
	stdout net.Conn // ours: Read
	rin    net.Conn // the stream's: it reads the command's stdin from it
	rout   net.Conn // the stream's: it writes the command's stdout to it
	cancel context.CancelFunc

	done chan struct{} // closed once the stream has ended: err is set
	err  error

	closeStdin sync.Once
	closeAll   sync.Once
}

// startExec starts argv in pod's Container and returns at once: the stream is made in
// the background (a failure to make it is the stream's end, Exit's error). stderr, when
// set, receives the command's stderr.
func (c *Client) startExec(namespace, pod string, argv []string, stderr io.Writer) (*execStream, error) {
	ex, err := c.executor(c.execURL(namespace, pod, argv, stderr != nil))
	if err != nil {
		return nil, err
	}
	s := &execStream{done: make(chan struct{})}
	s.stdin, s.rin = net.Pipe()
	s.stdout, s.rout = net.Pipe()
	// client-go reports copy errors (a stdout nobody reads any more, a cut) through the
	// context's logger; they are this stream's end, which Exit reports.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	s.cancel = cancel
	opts := remotecommand.StreamOptions{Stdin: s.rin, Stdout: s.rout}
	if stderr != nil {
		opts.Stderr = stderr
	}
	go func() {
		err := ex.StreamWithContext(ctx, opts)
		s.err = err
		// Nothing reads the command's stdin or writes its stdout any more: a Write fails,
		// a Read sees EOF once it has read what was written.
		s.rin.Close()
		s.rout.Close()
		close(s.done)
	}()
	return s, nil
}

func (s *execStream) Read(b []byte) (int, error) {
	n, err := s.stdout.Read(b)
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed // our end closed (Close, a cut)
	}
	return n, err
}

func (s *execStream) Write(b []byte) (int, error) {
	n, err := s.stdin.Write(b)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) {
		err = kernelstart.ErrStdinClosed
	}
	return n, err
}

// CloseWrite closes the command's stdin: the stream carries its end (a WebSocket CLOSE of
// the stdin channel, or SPDY's half-close) and the command reads EOF.
func (s *execStream) CloseWrite() error {
	s.closeStdin.Do(func() { s.stdin.Close() })
	return nil
}

// Close ends the stream: stdin closed, the stream cancelled (the API server ends its
// connection to the kubelet; the command reads EOF on stdin), our end of stdout closed.
// The command itself ends by its stdin's end; Exit then reports the stream's end.
func (s *execStream) Close() error {
	s.closeAll.Do(func() {
		_ = s.CloseWrite()
		s.cancel()
		s.stdout.Close()
	})
	return nil
}

// cut ends a stream whose stdout is not read to its end: a copy blocked on it returns.
func (s *execStream) cut() { s.stdout.Close() }

// Done is closed once the stream has ended.
func (s *execStream) Done() <-chan struct{} { return s.done }

// result is the command's exit status once the stream has ended: 0, its code, or -1 and
// the stream's error when it did not end with an exit status (it could not be made, the
// connection broke, it was cancelled).
func (s *execStream) result() (int, error) {
	<-s.done
	if s.err == nil {
		return 0, nil
	}
	var ee utilexec.ExitError
	if errors.As(s.err, &ee) && ee.Exited() {
		return ee.ExitStatus(), nil
	}
	return -1, s.err
}

// Exit blocks until the stream has ended or ctx ends, and returns the command's exit
// status (see result).
func (s *execStream) Exit(ctx context.Context) (int, error) {
	select {
	case <-s.done:
		return s.result()
	case <-ctx.Done():
		return -1, context.Cause(ctx)
	}
}

type execAddr struct{}

func (execAddr) Network() string { return "kubernetes-exec" }
func (execAddr) String() string  { return "exec" }

func (s *execStream) LocalAddr() net.Addr  { return execAddr{} }
func (s *execStream) RemoteAddr() net.Addr { return execAddr{} }

func (s *execStream) SetDeadline(t time.Time) error {
	return errors.Join(s.stdout.SetReadDeadline(t), s.stdin.SetWriteDeadline(t))
}
func (s *execStream) SetReadDeadline(t time.Time) error  { return s.stdout.SetReadDeadline(t) }
func (s *execStream) SetWriteDeadline(t time.Time) error { return s.stdin.SetWriteDeadline(t) }
