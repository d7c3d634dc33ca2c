package kernelstart

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
)

// pooledKernel stands in for a pooled stub: it binds kernel.sock in its run directory,
// reads its start block from fd 0 to its end (an empty one: its pool's stdin ended, exit
// 2), then answers its first connection with what it read.
const pooledKernel = `
import os, socket, sys
run = os.environ["KENNEL_KERNEL_RUN"]
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(run, "kernel.sock"))
s.listen(1)
data = b""
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    data += chunk
if not data:
    sys.exit(2)
c, _ = s.accept()
c.sendall(b"got " + data)
c.close()
`

// startPooledLocally runs the pooled start program (under the bridge) over kernel (a
// stand-in like pooledKernel) on this host, and returns its stdin, its stdout and the kernel's run directory.
func startPooledLocally(t *testing.T, kernel string) (*exec.Cmd, io.WriteCloser, *bufio.Reader, string) {
	t.Helper()
	python := testneed.Python(t)
	run := filepath.Join(t.TempDir(), "run")
	block, err := Block{Dir: t.TempDir(), Run: run, Env: []string{"KENNEL_KERNEL_RUN=" + run, "KENNEL_KERNEL_POOLED=1"}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-I", "-S", "-c", DetachedProgram(kernel))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if _, err := in.Write(block); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); line != PooledReady {
		t.Fatalf("first line %q, %v; want %q", line, err, PooledReady)
	}
	if _, err := os.Stat(filepath.Join(run, "kernel.sock")); err != nil {
		t.Fatalf("ready before the kernel's socket: %v", err)
	}
	return cmd, in, r, run
}

// A pooled start: ready once the kernel's socket is bound; the length-framed start block
// reaches the kernel whole, ended (its fd 0 a pipe the start program closes); then the
// start program is the kernel's first connection.
func TestPooledStartHandsTheBlockToTheKernel(t *testing.T) {
	_, in, r, _ := startPooledLocally(t, pooledKernel)
	start := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n{\"dir\": \"/\", \"env\": [\"A=b\"]}\n"
	framed := binary.BigEndian.AppendUint32(nil, uint32(len(start)))
	// Written in two pieces, the frame split: the start program reads exactly its length.
	if _, err := in.Write(append(framed, start[:7]...)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := in.Write([]byte(start[7:])); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); line != BridgeReady {
		t.Fatalf("after the block: %q, %v; want %q", line, err, BridgeReady)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "got "+start {
		t.Fatalf("the kernel read %q, %v; want %q", got, err, "got "+start)
	}
}

// A pool's stdin that ends before the start block (its controller gone) ends the start
// program and, its pipe ended, the kernel.
func TestPooledStartEndsWithItsStdin(t *testing.T) {
	cmd, in, _, run := startPooledLocally(t, pooledKernel)
	rec, err := os.ReadFile(filepath.Join(run, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(rec))[0])
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	if err := cmd.Wait(); err == nil {
		t.Error("the start program exited 0 with no start block")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			break // gone, or a zombie nobody here reaps: it has ended
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pooled kernel %d runs on after its start program ended", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A start block over the limit is refused by the start program, and nothing reaches the
// kernel.
func TestPooledStartRefusesAnOversizedBlock(t *testing.T) {
	cmd, in, r, _ := startPooledLocally(t, pooledKernel)
	if _, err := in.Write(binary.BigEndian.AppendUint32(nil, MaxBlock+1)); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); len(rest) != 0 {
		t.Errorf("after an oversized frame the start program wrote %q", rest)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the start program exited 0 on an oversized block")
	}
}

// localProc runs a command on this host as a Proc: its stdin and stdout behind one end
// of a net.Pipe.
type localProc struct {
	net.Conn
	cmd  *exec.Cmd
	done chan struct{}
}

// Close ends both streams and the command, as Proc's contract says a transport does.
func (p *localProc) Close() error {
	err := p.Conn.Close()
	_ = p.cmd.Process.Kill()
	return err
}

func (p *localProc) Exit(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func localRunner(t *testing.T) Runner {
	return func(ctx context.Context, argv []string, stderr io.Writer) (Proc, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		mine, theirs := net.Pipe()
		p := &localProc{Conn: mine, cmd: cmd, done: make(chan struct{})}
		go func() { _, _ = io.Copy(in, theirs); in.Close() }()
		go func() {
			_, _ = io.Copy(theirs, out)
			_ = cmd.Wait()
			theirs.Close()
			close(p.done)
		}()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
		return p, nil
	}
}

// StartPooled and HandOut over a local start command: ready, then the start block framed
// and the command returned as the kernel's first connection; a command that ends before
// it is ready is a *BridgeError with its stderr.
func TestStartPooledThenHandOut(t *testing.T) {
	python := testneed.Python(t)
	run := filepath.Join(t.TempDir(), "run")
	block, err := Block{Dir: t.TempDir(), Run: run, Env: []string{"KENNEL_KERNEL_RUN=" + run, "KENNEL_KERNEL_POOLED=1"}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := StartPooled(ctx, localRunner(t), []string{python, "-I", "-S", "-c", DetachedProgram(pooledKernel)}, block, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Repeat("ab", 32) + "\n{}\n"
	conn, err := p.HandOut(ctx, []byte(start))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(conn); err != nil || string(got) != "got "+start {
		t.Fatalf("the kernel's first connection read %q, %v", got, err)
	}

	bad, err := Block{Dir: t.TempDir(), Run: filepath.Join(t.TempDir(), "run"), Env: []string{"KENNEL_KERNEL_RUN=" + run, "KENNEL_KERNEL_POOLED=1"}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	_, err = StartPooled(ctx, localRunner(t), []string{python, "-I", "-S", "-c", Program(pooledKernel)}, bad, nil)
	var be *BridgeError
	if !errors.As(err, &be) || !strings.Contains(be.Stderr, "beside the bridge") {
		t.Fatalf("a pooled start without the bridge: %v, want a *BridgeError saying so", err)
	}
}

// A pooled kernel that ends while it waits for its hand-out (killed, out of memory) ends
// its start program, though the pool's stdin stays open: the pool sees the exec end and
// drops the kernel, rather than hand out one that is gone.
func TestPooledStartEndsWithItsKernel(t *testing.T) {
	const diesWaiting = `
import os, socket
run = os.environ["KENNEL_KERNEL_RUN"]
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(run, "kernel.sock"))
s.listen(1)
os._exit(5)
`
	cmd, in, _, _ := startPooledLocally(t, diesWaiting)
	defer in.Close() // open until the end: only the kernel's end may end the program
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("the start program after its kernel ended: %v, want exit status 3", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the start program waits on for a hand-out after its kernel ended")
	}
}

// A start command that never says it is ready (a stalled exec) is given up when ctx ends:
// StartPooled returns ctx's cause and the command is closed, so a pool's filler is never
// held by it.
func TestStartPooledGivesUpAStalledStart(t *testing.T) {
	python := testneed.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	run := localRunner(t)
	var proc Proc
	began := time.Now()
	_, err := StartPooled(ctx, func(ctx context.Context, argv []string, stderr io.Writer) (Proc, error) {
		p, err := run(ctx, argv, stderr)
		proc = p
		return p, err
	}, []string{python, "-I", "-S", "-c", "import time; time.sleep(60)"}, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a start that never got ready: %v, want the deadline", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("given up after %v", d)
	}
	ectx, ecancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ecancel()
	if _, err := proc.Exit(ectx); err != nil {
		t.Errorf("the stalled start command was not ended: %v", err)
	}
}
