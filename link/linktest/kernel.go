// Package linktest is a detached kernel's side of the link written in Go, for tests of
// the controller's side: it listens on a Unix socket, checks attaches (token, kernel id),
// answers hellos with its epoch and ack, keeps the kernel's outbox (link.Outbox with the
// kernel's bounds) and applies each controller frame at most once, acknowledging it at
// once — the rules kennel/_link.py keeps in the real stub.
package linktest

import (
	"bufio"
	"crypto/subtle"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kennel-dev/kennel/link"
)

// Kernel is a Go stand-in for a detached kernel's link.
type Kernel struct {
	ID, Token string
	// Hello holds the fixed fields of every hello (pid, bundle, ...); epoch, ack and
	// dropped are the kernel's own.
	Hello link.Hello

	ln   net.Listener
	path string

	mu      sync.Mutex
	out     *link.Outbox
	in      link.Inbox
	epoch   uint64
	conn    net.Conn
	kick    chan struct{}
	applied [][]byte
	refused int
	attach  link.Attach // the last accepted attach
	lines   int         // envelope lines read, bare acks included
	wg      sync.WaitGroup
}

// Start listens on dir/kernel.sock and serves attaches until the test ends.
func Start(t testing.TB, dir, id, token string) *Kernel {
	t.Helper()
	path := filepath.Join(dir, "kernel.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &Kernel{ID: id, Token: token, ln: ln, path: path, out: link.NewOutbox(link.KernelMaxFrames, link.KernelMaxBytes),
		Hello: link.Hello{Protocol: link.Protocol, PID: os.Getpid(), PGID: os.Getpid(), Python: "3.11.7"}}
	k.wg.Go(k.accept)
	t.Cleanup(k.Close)
	return k
}

// Attach is the last attach the kernel accepted.
func (k *Kernel) Attach() link.Attach {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.attach
}

// Lines is how many envelope lines (bare acks included) the kernel has read.
func (k *Kernel) Lines() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lines
}

// Socket is the path the kernel listens on.
func (k *Kernel) Socket() string { return k.path }

// Close stops listening and drops the connection (the kernel is gone: dials find no one).
func (k *Kernel) Close() {
	_ = k.ln.Close()
	k.Drop()
	k.wg.Wait()
}

// Push puts a kernel frame (one JSON object, no newline) in the outbox.
func (k *Kernel) Push(frame []byte, key string) {
	k.mu.Lock()
	k.out.Push(frame, key)
	kick := k.kick
	k.mu.Unlock()
	poke(kick)
}

// Applied returns the controller frames applied so far, in order.
func (k *Kernel) Applied() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]byte(nil), k.applied...)
}

// Epoch is the number of accepted attaches.
func (k *Kernel) Epoch() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epoch
}

// Refused counts refused attaches.
func (k *Kernel) Refused() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refused
}

// Drop cuts the attached connection (a network fault); the kernel keeps its state.
func (k *Kernel) Drop() {
	k.mu.Lock()
	if k.conn != nil {
		_ = k.conn.Close()
	}
	k.mu.Unlock()
}

func poke(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (k *Kernel) accept() {
	for {
		c, err := k.ln.Accept()
		if err != nil {
			return
		}
		k.wg.Go(func() { k.serve(c) })
	}
}

func (k *Kernel) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return
	}
	a, err := link.DecodeAttach(line)
	if err != nil || a.Kernel != k.ID || subtle.ConstantTimeCompare([]byte(a.Token), []byte(k.Token)) != 1 {
		k.mu.Lock()
		k.refused++
		k.mu.Unlock()
		_, _ = c.Write(link.RefusedLine("bad attach"))
		return
	}
	k.mu.Lock()
	if k.conn != nil {
		_ = k.conn.Close() // the newest attach wins
	}
	k.epoch++
	k.conn = c
	k.attach = a
	kick := make(chan struct{}, 1)
	k.kick = kick
	k.out.Ack(a.Ack)
	h := k.Hello
	h.Epoch, h.Ack, h.Dropped = k.epoch, k.in.Last(), k.out.TakeDropped()
	k.mu.Unlock()
	if _, err := c.Write(h.MarshalLine()); err != nil {
		return
	}
	done, over := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		k.write(c, kick, over, a.Ack)
		_ = c.Close()
	}()
	k.read(br, kick)
	_ = c.Close()
	close(over)
	<-done
}

// read applies envelopes, each seq at most once, and asks for an ack at once.
func (k *Kernel) read(br *bufio.Reader, kick chan struct{}) {
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		e, err := link.Decode(line)
		if err != nil {
			return // a protocol fault: drop the connection
		}
		k.mu.Lock()
		k.lines++
		k.out.Ack(e.Ack)
		if !e.Bare() && k.in.Accept(e.Seq) {
			k.applied = append(k.applied, append([]byte(nil), e.Frame...))
		}
		k.mu.Unlock()
		poke(kick)
	}
}

// write sends the outbox past sent and the current ack whenever it changes.
func (k *Kernel) write(c net.Conn, kick, over chan struct{}, sent uint64) {
	var acked uint64
	var buf []byte
	for {
		k.mu.Lock()
		if k.conn != c {
			k.mu.Unlock()
			return
		}
		pending := k.out.After(sent)
		ack := k.in.Last()
		k.mu.Unlock()
		buf = buf[:0]
		for _, e := range pending {
			buf = link.Envelope{Seq: e.Seq, Ack: ack, Frame: e.Frame}.Append(buf)
			sent = e.Seq
		}
		if len(pending) == 0 && ack > acked {
			buf = link.Envelope{Ack: ack}.Append(buf)
		}
		if len(buf) > 0 {
			if _, err := c.Write(buf); err != nil {
				return
			}
			acked = ack
		}
		select {
		case <-kick:
		case <-over:
			return
		}
	}
}
