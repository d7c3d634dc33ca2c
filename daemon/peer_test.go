package daemon_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/testneed"
)

// peerClient is a tiny HTTP client: it connects to the socket, sends one request, and
// prints what came back ("EOF:<n>" with the bytes, or "RESET").
const peerClient = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
data = b""
try:
    s.sendall(b"GET /sessions HTTP/1.1\r\nHost: kennel\r\nConnection: close\r\n\r\n")
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
except (ConnectionResetError, BrokenPipeError):
    print("RESET")
    sys.exit(0)
print("EOF:%d:%s" % (len(data), data[:20].decode("latin-1")))
`

// TestPeerOfAnotherUserIsRefusedUnread runs the same client as uid 65534 and as the
// daemon's uid against the daemon's peer check.
//
// The daemon's other two layers (a 0700 socket directory, a 0600 socket) keep another
// user from even connecting, so to reach the third layer this test serves the daemon's
// handler, behind its PeerListener, on a socket it opens itself in a test-only 0711
// directory with the socket file 0666: the peer check is then the only thing between the
// second user and the API.
func TestPeerOfAnotherUserIsRefusedUnread(t *testing.T) {
	testneed.Root(t) // to run a client as uid 65534
	py := testneed.Tool(t, "/usr/bin/python3")

	dir := shortDir(t)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "open.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	srv, err := daemon.New(daemon.Options{
		Socket: sock, StateDir: filepath.Join(shortDir(t), "state"),
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, l) }()
	defer func() { cancel(); <-done }()

	run := func(cred *syscall.Credential) string {
		cmd := exec.Command(py, "-I", "-S", "-c", peerClient, sock)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client (cred %v): %v: %s", cred, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	other := run(&syscall.Credential{Uid: 65534, Gid: 65534})
	if other != "RESET" && other != "EOF:0:" {
		t.Fatalf("uid 65534 got %q, want no byte (EOF or reset)", other)
	}
	if !strings.Contains(logs.String(), "uid=65534") {
		t.Fatalf("no warning naming uid 65534 in %q", logs.String())
	}
	own := run(nil)
	if !strings.HasPrefix(own, "EOF:") || !strings.Contains(own, "HTTP/1.1 200") {
		t.Fatalf("the daemon's own uid got %q, want a 200 reply", own)
	}
}

// A connection whose peer uid cannot be read (not a unix socket) is closed unread.
func TestPeerWhoseUIDCannotBeReadIsRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused []int
	pl := &daemon.PeerListener{Listener: l, UID: os.Geteuid(), OnRefuse: func(uid int) { refused = append(refused, uid) }}
	acc := make(chan error, 1)
	go func() {
		c, err := pl.Accept()
		if err == nil {
			c.Close()
			err = errors.New("accepted a peer of unknown uid")
		}
		acc <- err
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, rerr := c.Read(make([]byte, 1))
	c.Close()
	if n != 0 || rerr == nil || errors.Is(rerr, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d, %v: want the connection closed", n, rerr)
	}
	l.Close()
	if err := <-acc; err == nil || strings.Contains(err.Error(), "accepted") {
		t.Fatalf("accept: %v", err)
	}
	if pl.Refused() != 1 || len(refused) != 1 || refused[0] != -1 {
		t.Fatalf("refused %d %v, want one of uid -1", pl.Refused(), refused)
	}
}

func TestListenReplacesAStaleSocketAndRefusesALiveOne(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "k.sock")
	// A stale socket: bound, then its listener gone without unlinking the file.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	old := syscall.Umask(0)
	l, err := daemon.Listen(context.Background(), sock)
	syscall.Umask(old)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	if m := modeOf(t, sock); m != 0o600 {
		t.Errorf("socket mode %#o, want 0600", m)
	}
	if _, err := daemon.Listen(context.Background(), sock); !errors.Is(err, daemon.ErrDaemonRunning) {
		t.Errorf("a live socket: %v, want ErrDaemonRunning", err)
	}
	l.Close()
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left after close: %v", err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.Listen(context.Background(), file); !errors.Is(err, daemon.ErrNotSocket) {
		t.Errorf("a regular file at the path: %v, want ErrNotSocket", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the file was changed")
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.Listen(context.Background(), filepath.Join(dir, "x.sock")); !errors.Is(err, daemon.ErrSocketDir) {
		t.Errorf("an open directory: %v, want ErrSocketDir", err)
	}
}
