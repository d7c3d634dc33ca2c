package sshtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testneed"
)

// Alias is the Host name ConfigFile gives the server.
const Alias = "kennel-test"

// Banner is what the lean home's login profile prints to stdout on every command.
const Banner = "kennel-sshtest banner: welcome to the test host"

// Server is a running sshd and the files a client needs to reach it.
type Server struct {
	// Addr is the proxy's "127.0.0.1:port": connect here to be counted.
	Addr string
	// Host and Port are Addr's parts.
	Host string
	Port int
	// SSHDAddr is sshd's own address, bypassing the proxy (uncounted).
	SSHDAddr string
	// Home is the user's home directory as sshd sees it (lean, temporary).
	Home string
	// KeyFile is the authorized user's private key (no passphrase); KeyFile+".pub" its
	// public key.
	KeyFile string
	// OtherKeyFile is a private key sshd does not accept.
	OtherKeyFile string
	// HostKeyLine is the server's host public key in authorized_keys form.
	HostKeyLine string
	// KnownHosts is a known_hosts file that trusts the host key at Addr.
	KnownHosts string
	// ConfigFile is an ssh_config file with "Host kennel-test" naming HostName, Port,
	// User and IdentityFile for the proxy.
	ConfigFile string
	// Dir is the temporary directory holding all of the above.
	Dir string
	// SSHDPID is the pid of the listening sshd: every connection is served by a child of
	// it (see SessionProcess).
	SSHDPID int

	conns atomic.Int64
	veth  string // the proxy's end of a partitionable host's veth pair
}

// Connections returns how many TCP connections the proxy has accepted so far.
func (s *Server) Connections() int64 { return s.conns.Load() }

// Start starts sshd behind a counting proxy and stops both at the end of the test. It
// skips (fails under CI=true) when not root or when sshd, ssh-keygen, ssh or unshare is
// missing.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// Options choose a test host's variations.
type Options struct {
	// Partitionable puts sshd in a network namespace of its own (StartPartitionable).
	Partitionable bool
	// NoSFTP leaves sshd without its SFTP subsystem: a host whose files kennel cannot
	// reach, though it runs kernels.
	NoSFTP bool
}

// StartPartitionable is Start with sshd in a network namespace of its own, reached from
// the proxy over a veth pair, so that Cut partitions the host (packets dropped, no
// reset: what a network partition is) and Restore heals it. It also needs ip(8) and
// network namespaces.
func StartPartitionable(t testing.TB) *Server { return StartWith(t, Options{Partitionable: true}) }

// Cut partitions a StartPartitionable host: its veth link goes down, so every packet
// between the proxy and sshd is lost until Restore.
func (s *Server) Cut(t testing.TB) {
	t.Helper()
	if s.veth == "" {
		t.Fatal("sshtest: Cut of a host not started partitionable")
	}
	ipRun(t, "link", "set", s.veth, "down")
}

// Restore heals Cut.
func (s *Server) Restore(t testing.TB) {
	t.Helper()
	ipRun(t, "link", "set", s.veth, "up")
}

func ipRun(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("sshtest: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// netns makes a network namespace and a veth pair into it for sshd: the proxy's end
// 10.213.N.1/30 here, sshd's 10.213.N.2/30 there. Both go at the end of the test.
func (s *Server) netns(t testing.TB) (ns, addr string) {
	t.Helper()
	var b [3]byte
	var subnet string
	for try := 0; ; try++ {
		_, _ = rand.Read(b[:]) // never fails
		// A subnet no interface of the host has (another test's, or one a killed test
		// left): two veths with one subnet would route each other's packets.
		subnet = fmt.Sprintf("10.213.%d", b[0])
		if !addrInUse(subnet+".") || try == 50 {
			break
		}
	}
	tag := fmt.Sprintf("%x", b)
	ns, peer := "ktssh"+tag, "ktb"+tag
	s.veth = "kta" + tag
	ipRun(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipRun(t, "link", "add", s.veth, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", s.veth).Run() })
	ipRun(t, "link", "set", peer, "netns", ns)
	ipRun(t, "addr", "add", subnet+".1/30", "dev", s.veth)
	ipRun(t, "link", "set", s.veth, "up")
	ipRun(t, "-n", ns, "addr", "add", subnet+".2/30", "dev", peer)
	ipRun(t, "-n", ns, "link", "set", peer, "up")
	ipRun(t, "-n", ns, "link", "set", "lo", "up")
	return ns, subnet + ".2"
}

// addrInUse reports whether an address of the host's interfaces begins with prefix.
func addrInUse(prefix string) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool { return strings.HasPrefix(a.String(), prefix) })
}

// StartWith is Start with the variations opts chooses.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	testneed.Root(t) // sshd must log in a user as itself
	testneed.Tools(t, "/usr/sbin/sshd", "ssh", "ssh-keygen", "unshare")
	if opts.Partitionable {
		testneed.Tools(t, "ip")
	}

	dir, err := os.MkdirTemp("", "kennel-sshtest-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	s := &Server{Dir: dir, Host: "127.0.0.1", Home: filepath.Join(dir, "home")}
	must(t, os.MkdirAll(s.Home, 0o755))
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("sshtest: /run/sshd: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(s.Home, ".profile"), []byte("echo '"+Banner+"'\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(s.Home, ".bashrc"), []byte("echo 'bashrc: "+Banner+"'\n"), 0o644))

	s.KeyFile = filepath.Join(dir, "id_user")
	s.OtherKeyFile = filepath.Join(dir, "id_other")
	hostKey := filepath.Join(dir, "host_key")
	for _, k := range []string{s.KeyFile, s.OtherKeyFile, hostKey} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kennel-sshtest", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("sshtest: ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(s.KeyFile + ".pub")
	must(t, err)
	authorized := filepath.Join(dir, "authorized_keys")
	must(t, os.WriteFile(authorized, pub, 0o600))
	hk, err := os.ReadFile(hostKey + ".pub")
	must(t, err)
	f := strings.Fields(string(hk))
	s.HostKeyLine = f[0] + " " + f[1]

	passwd, err := leanPasswd(s.Home)
	must(t, err)
	passwdFile := filepath.Join(dir, "passwd")
	must(t, os.WriteFile(passwdFile, passwd, 0o644))

	// The proxy listens first, so its port is held; sshd gets a port found free.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	s.Addr = ln.Addr().String()
	s.Port = ln.Addr().(*net.TCPAddr).Port

	var cmd *exec.Cmd
	sshdLog := filepath.Join(dir, "sshd.log")
	listen, ns := "127.0.0.1", ""
	if opts.Partitionable {
		ns, listen = s.netns(t)
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		must(t, err)
		s.SSHDAddr = listen + ":" + strconv.Itoa(port)
		conf := filepath.Join(dir, "sshd_config")
		must(t, os.WriteFile(conf, []byte(sshdConfig(listen, port, hostKey, authorized, filepath.Join(dir, "sshd.pid"), !opts.NoSFTP)), 0o600))
		argv := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$1" /etc/passwd && exec /usr/sbin/sshd -D -e -f "$2"`, "sh", passwdFile, conf}
		if ns != "" {
			argv = append([]string{"ip", "netns", "exec", ns}, argv...)
		}
		cmd = exec.Command(argv[0], argv[1:]...)
		log, err := os.Create(sshdLog)
		must(t, err)
		cmd.Stdout, cmd.Stderr = log, log
		err = cmd.Start()
		log.Close()
		must(t, err)
		if waitSSH(s.SSHDAddr, 10*time.Second) {
			break
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if attempt == 2 {
			b, _ := os.ReadFile(sshdLog)
			t.Fatalf("sshtest: sshd did not start:\n%s", b)
		}
	}
	// unshare and sh exec: the process started is the listening sshd itself.
	s.SSHDPID = cmd.Process.Pid
	t.Cleanup(func() {
		// sshd's children first: a connection a partition killed keeps its sshd session
		// process (no ClientAliveInterval here), which would outlive the server.
		if all, err := procfs.All(); err == nil {
			for _, p := range all {
				if p.PPID == cmd.Process.Pid {
					_ = syscall.Kill(p.PID, syscall.SIGKILL)
				}
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(sshdLog)
			t.Logf("sshd log:\n%s", b[max(len(b)-16<<10, 0):])
		}
	})
	go s.proxy(ln)

	s.KnownHosts = filepath.Join(dir, "known_hosts")
	must(t, os.WriteFile(s.KnownHosts, []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", s.Port, s.HostKeyLine)), 0o600))
	s.ConfigFile = filepath.Join(dir, "ssh_config")
	must(t, os.WriteFile(s.ConfigFile, []byte(fmt.Sprintf(
		"Host %s\n  HostName 127.0.0.1\n  Port %d\n  User root\n  IdentityFile %s\n",
		Alias, s.Port, s.KeyFile)), 0o600))
	return s
}

func sshdConfig(listen string, port int, hostKey, authorized, pidFile string, sftp bool) string {
	sub := "Subsystem sftp internal-sftp\n"
	if !sftp {
		sub = ""
	}
	return fmt.Sprintf(`ListenAddress %s:%d
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
LogLevel VERBOSE
PrintMotd no
PrintLastLog no
MaxSessions 64
MaxStartups 64
%s`, listen, port, hostKey, pidFile, authorized, sub)
}

// leanPasswd is /etc/passwd with root's home set to home and its shell to /bin/bash.
func leanPasswd(home string) ([]byte, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) == 7 && f[0] == "root" {
			f[5], f[6] = home, "/bin/bash"
			line = strings.Join(f, ":") + "\n"
		}
		out.WriteString(line)
	}
	return out.Bytes(), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitSSH waits until addr answers with an SSH banner.
func waitSSH(addr string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "SSH-2.0") {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// proxy forwards every connection to sshd, counting them.
func (s *Server) proxy(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.conns.Add(1)
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", s.SSHDAddr)
			if err != nil {
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Go(func() {
				_, _ = io.Copy(u, c)
				_ = u.(*net.TCPConn).CloseWrite()
			})
			_, _ = io.Copy(c, u)
			_ = c.(*net.TCPConn).CloseWrite()
			wg.Wait()
		}()
	}
}

// SSHArgs returns the system ssh client's arguments that reach the server as root
// (through the proxy), before the destination: ssh SSHArgs()... Alias command.
func (s *Server) SSHArgs() []string {
	return []string{"-F", s.ConfigFile, "-o", "UserKnownHostsFile=" + s.KnownHosts,
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR"}
}

// RawRun runs a shell command on the server over the system ssh client and returns its
// whole stdout, banner included.
func (s *Server) RawRun(t testing.TB, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ssh", append(s.SSHArgs(), Alias, command)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sshtest: ssh %q: %v\n%s", command, err, stderr.String())
	}
	return stdout.String()
}

// Run runs a shell command on the server over the system ssh client (a separate,
// counted connection) and returns its stdout with the login banner lines removed. It
// fails the test when the command fails.
func (s *Server) Run(t testing.TB, command string) string {
	t.Helper()
	var out strings.Builder
	for line := range strings.Lines(s.RawRun(t, command)) {
		if !strings.Contains(line, Banner) {
			out.WriteString(line)
		}
	}
	return out.String()
}

// SessionProcess returns the sshd child serving the connection that runs pid: the
// ancestor of pid (or pid itself) whose parent is the listening sshd. A test stops or
// kills it to freeze or drop that one connection while sshd goes on accepting others.
func (s *Server) SessionProcess(pid int) (int, error) {
	for p, hops := pid, 0; p > 1 && hops < 64; hops++ {
		st, err := procfs.Read(p)
		if err != nil {
			return 0, fmt.Errorf("sshtest: session process of %d: %w", pid, err)
		}
		if st.PPID == s.SSHDPID {
			return p, nil
		}
		p = st.PPID
	}
	return 0, fmt.Errorf("sshtest: process %d is not served by sshd %d", pid, s.SSHDPID)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
}
