package controller_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/transports"
)

// slowRelease is a transport whose one kernel says hello, then dies of the memory limit
// at its first frame: its end (OOM) is known at once (transports.Ender), but its Wait
// returns only once release closes, as a container's removal or a pod's deletion may take
// seconds.
type slowRelease struct {
	release chan struct{}
	dead    chan struct{}
}

func (s *slowRelease) Name() string                          { return "slow" }
func (s *slowRelease) Capabilities() transports.Capabilities { return transports.Capabilities{} }

func (s *slowRelease) Start(context.Context, transports.Spec) (transports.Kernel, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	k := &slowKernel{s: s, in: inW, out: outR}
	go func() {
		_, _ = io.WriteString(outW, `{"event":"hello","id":"","protocol":1,"pid":1,"pgid":1,"python":"3.11.2","bundle":"`+strings.Repeat("0", 64)+`"}`+"\n")
		_, _ = bufio.NewReader(inR).ReadString('\n') // the first frame: the kernel dies
		close(s.dead)
		_ = outW.Close()
		_ = inR.Close()
	}()
	return k, nil
}

type slowKernel struct {
	s    *slowRelease
	in   *io.PipeWriter
	out  *io.PipeReader
	once sync.Once
}

func (k *slowKernel) Stdin() io.WriteCloser  { return k.in }
func (k *slowKernel) Stdout() io.Reader      { return k.out }
func (k *slowKernel) Info() transports.Info  { return transports.Info{Transport: "slow"} }
func (k *slowKernel) Ended() <-chan struct{} { return k.s.dead }
func (k *slowKernel) Exit() transports.Exit {
	<-k.s.dead
	return transports.Exit{Code: 137, OOM: true}
}
func (k *slowKernel) Kill(ctx context.Context) error {
	k.once.Do(func() { close(k.s.release) })
	return nil
}
func (k *slowKernel) Wait() (transports.Exit, error) {
	<-k.s.release
	return k.Exit(), nil
}

// TestAnOOMEndIsToldBeforeTheKernelsRelease: a kernel killed by the memory limit whose
// release takes longer than the controller waits for (a pod's deletion) fails its cell
// with ErrOOM, read from its end (transports.Ender), not a generic exit.
func TestAnOOMEndIsToldBeforeTheKernelsRelease(t *testing.T) {
	tr := &slowRelease{release: make(chan struct{}), dead: make(chan struct{})}
	go func() { // the release comes long after the end: past the controller's oomWait
		<-tr.dead
		time.Sleep(5 * time.Second)
		select {
		case <-tr.release:
		default:
			close(tr.release)
		}
	}()
	s, err := controller.Start(context.Background(), controller.Options{Transport: tr, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	_, err = s.Execute(context.Background(), "x = bytearray(1 << 40)", nil)
	if !errors.Is(err, controller.ErrOOM) {
		t.Fatalf("a cell whose kernel the memory limit killed: %v, want ErrOOM", err)
	}
}
