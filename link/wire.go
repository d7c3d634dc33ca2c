package link

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// wire is a connection's bytes as the link moves them once the handshake is done: a
// Read any goroutine can cut short (Interrupt, until ClearInterrupt), a write that never
// waits (TryWrite) beside one that does (Write), and Close, which ends a Read or Write
// under way. Read and Write may run at once; each of them from one goroutine at a time.
type wire interface {
	Read(p []byte) (int, error) // errInterrupted while interrupted
	Interrupt()
	ClearInterrupt()
	TryWrite(p []byte) int // what the socket took at once; 0 where it cannot tell
	Write(p []byte) (int, error)
	Close() error
}

// errInterrupted: a wire's Read was cut short by Interrupt.
var errInterrupted = errors.New("link: read interrupted")

// newWire makes the wire of a handshaken connection. A Unix socket becomes an fdWire
// (conn itself is closed); anything else is a netWire over conn.
func newWire(conn net.Conn) wire {
	if uc, ok := conn.(*net.UnixConn); ok {
		if w, err := newFDWire(uc); err == nil {
			return w
		}
	}
	w := &netWire{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			w.raw = raw
		}
	}
	return w
}

// netWire is a wire over a net.Conn: Interrupt is a read deadline in the past.
type netWire struct {
	conn net.Conn
	raw  syscall.RawConn // nil: TryWrite takes nothing
}

// aLongTimeAgo is a read deadline that cuts a read short at once.
var aLongTimeAgo = time.Unix(1, 0)

func (w *netWire) Read(p []byte) (int, error) {
	n, err := w.conn.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = errInterrupted
	}
	return n, err
}

func (w *netWire) Interrupt()                  { _ = w.conn.SetReadDeadline(aLongTimeAgo) }
func (w *netWire) ClearInterrupt()             { _ = w.conn.SetReadDeadline(time.Time{}) }
func (w *netWire) Write(p []byte) (int, error) { return w.conn.Write(p) }
func (w *netWire) Close() error                { return w.conn.Close() }

func (w *netWire) TryWrite(p []byte) int {
	if w.raw == nil {
		return 0
	}
	written := 0
	_ = w.raw.Write(func(fd uintptr) bool {
		written = writeSome(int(fd), p)
		return true
	})
	return written
}

// fdWire is a wire over a Unix socket's descriptor of its own, outside the Go runtime's
// poller, waited on with poll(2) for reading only. The runtime's poller registers
// every socket for writing as well, so each time the kernel takes the bytes this side
// sent, the wake-up of the socket's write space would wake a thread of this process
// for nothing, and the kernel would pay for it inside its recv; a poll(2) for reading
// is not woken by it. Close shuts the socket down (which ends a poll under way) and
// closes the descriptor once no call uses it.
type fdWire struct {
	mu     sync.Mutex
	fd     int
	intrR  int // readable while interrupted
	intrW  int
	intr   bool
	users  int // calls using fd or intrR now
	closed bool
}

func newFDWire(uc *net.UnixConn) (*fdWire, error) {
	f, err := uc.File() // a duplicate, outside the poller
	if err != nil {
		return nil, err
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, err
	}
	uc.Close() // leaves the poller; fd stays open
	return &fdWire{fd: fd, intrR: p[0], intrW: p[1]}, nil
}

// acquire marks a call using the descriptors; false once the wire is closed.
func (w *fdWire) acquire() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.users++
	return true
}

func (w *fdWire) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.users--
	if w.closed && w.users == 0 {
		w.closeFDs()
	}
}

func (w *fdWire) closeFDs() {
	unix.Close(w.fd)
	unix.Close(w.intrR)
	unix.Close(w.intrW)
}

func (w *fdWire) Read(p []byte) (int, error) {
	if !w.acquire() {
		return 0, net.ErrClosed
	}
	defer w.release()
	pfd := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.intrR), Events: unix.POLLIN}}
	for {
		w.mu.Lock()
		intr, closed := w.intr, w.closed
		w.mu.Unlock()
		if closed {
			return 0, net.ErrClosed
		}
		if intr {
			return 0, errInterrupted
		}
		n, err := unix.Read(w.fd, p)
		switch {
		case err == nil && n == 0 && len(p) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return 0, &net.OpError{Op: "read", Net: "unix", Err: os.NewSyscallError("read", err)}
		}
		// poll(2) blocks this goroutine's thread with its P: let what is runnable
		// (often the goroutine this one just handed a frame to) run first, rather than
		// wait for the runtime to take the P back.
		runtime.Gosched()
		if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
			return 0, &net.OpError{Op: "read", Net: "unix", Err: os.NewSyscallError("poll", err)}
		}
	}
}

func (w *fdWire) Interrupt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.intr {
		return
	}
	w.intr = true
	_, _ = unix.Write(w.intrW, []byte{0})
}

func (w *fdWire) ClearInterrupt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.intr {
		return
	}
	w.intr = false
	var b [16]byte
	for {
		if n, err := unix.Read(w.intrR, b[:]); n <= 0 || err != nil {
			return
		}
	}
}

func (w *fdWire) TryWrite(p []byte) int {
	if !w.acquire() {
		return 0
	}
	defer w.release()
	return writeSome(w.fd, p)
}

func (w *fdWire) Write(p []byte) (int, error) {
	if !w.acquire() {
		return 0, net.ErrClosed
	}
	defer w.release()
	pfd := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLOUT}}
	written := 0
	for written < len(p) {
		n, err := unix.Write(w.fd, p[written:])
		if n > 0 {
			written += n
		}
		switch {
		case err == nil || err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return written, &net.OpError{Op: "write", Net: "unix", Err: os.NewSyscallError("write", err)}
		}
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return written, net.ErrClosed
		}
		if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
			return written, &net.OpError{Op: "write", Net: "unix", Err: os.NewSyscallError("poll", err)}
		}
	}
	return written, nil
}

// Close shuts the socket down, ending a Read or Write under way, and closes the
// descriptors once no call uses them.
func (w *fdWire) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	_ = unix.Shutdown(w.fd, unix.SHUT_RDWR)
	_, _ = unix.Write(w.intrW, []byte{0})
	if w.users == 0 {
		w.closeFDs()
	}
	return nil
}

// writeSome writes what the non-blocking descriptor fd takes at once and returns how
// much that was (a failure is the writer goroutine's to meet).
func writeSome(fd int, p []byte) int {
	written := 0
	for written < len(p) {
		n, err := unix.Write(fd, p[written:])
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			break
		}
		written += n
	}
	return written
}
