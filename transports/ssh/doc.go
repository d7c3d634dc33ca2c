// Package ssh runs kernels on remote hosts over ssh, speaking the protocol itself
// (golang.org/x/crypto/ssh): the "ssh" transport.
//
// A Hosts holds one connection per resolved target ([user@]host[:port] through the
// user's ssh config: User, Port, HostName, IdentityFile, ProxyJump), shared by every
// session, probe and staging there; concurrent dials and probes of one host join one.
// Authentication uses the ssh agent (SSH_AUTH_SOCK) and the identity files; host keys are
// checked against known_hosts with accept-new semantics (an unknown host is added, a
// changed key is refused with ErrHostKeyChanged naming the file and the fix). A
// connection times out after ConnectTimeout and sends keepalives; one whose peer falls
// silent is closed within KeepAliveTimeout (see Remote kernels).
//
//	hosts, err := ssh.NewHosts(ssh.HostsOptions{})
//	if err != nil { ... }
//	defer hosts.Close()
//	p := hosts.Probe(ctx, "me@build-box") // os, arch, home, cores, python3, staged
//	if p.Status != ssh.StatusReady { ... p.Hint ... }
//	t := ssh.New(hosts, ssh.Options{Target: "me@build-box"})
//	k, err := t.Start(ctx, transports.Spec{SessionID: "s1", Dir: "/home/me/project"})
//
// # Fixed commands, clean streams
//
// Every remote command is a fixed string (the probe, staging, the kernel, the signal
// ladder): its inputs (interpreter, bundle hash, run id, directory, environment) travel
// on stdin, never in argv. Each runs through the user's login shell as
//
//	/bin/sh -c 'exec 3>&1 1>&2; exec "$SHELL" -l -c "exec 1>&3 3>&-; printf SENTINEL; SCRIPT"'
//
// so what the login profile prints goes to stderr, and the client skips whatever still
// reached stdout (a ~/.bashrc run by sshd itself) up to the sentinel line.
//
// # Staging
//
// The stub bundle goes to ~/.kennel-remote/<bundle-hash>/ as a tar over the shared
// connection, unpacked into a temporary directory beside it, checked against the hash
// and renamed into place: a bundle directory that exists is complete, and one that
// exists is never sent again (the probe reports it).
//
// # Remote kernels
//
// A kernel runs in ~/.kennel-remote/run/<id>/ (0700), which records its pid and start
// time (field 22 of /proc/<pid>/stat; it leads its process group). KENNEL_REMOTE_RUN=<id>
// is exported by the kernel command before the interpreter's exec, so the kernel's own
// /proc/<pid>/environ carries it, as does every process it starts. Kill closes the
// session's stdin (the stub ends its jobs at EOF), then sends SIGTERM and SIGKILL to the
// kernel's group by a remote command; the controller never signals a remote pid
// locally. After the end, a remote sweep ends every process still marked with the run
// (on Linux, read from /proc) and removes the run directory. The group is signalled only
// while the process under the recorded pid has the recorded start time (checked through
// a pidfd held across the signal), so a pid given to a later process is never signalled.
//
// A connection that drops, or goes unanswered for Hosts.KeepAliveTimeout (15 s by
// default: a keepalive every 5 s, 3 unanswered), ends its kernels' sessions: the
// kernel's Stdout and Wait then end with an ErrConnectionLost error naming the
// connection and its fault ("connection lost: EOF", "connection lost: keepalive: no
// answer for 15s"), and the transport ends the kernel on the host through a fresh
// connection (TERM, then KILL, to its group and every marked process; the sweep). When
// the host cannot be reached for that, the error says so; the kernel then ends at the
// stdin EOF it gets once the host's sshd drops the session (within its EOF grace, if a
// cell holds it). A process that left the kernel's group and cleared its environment is
// out of reach of both the ladder and the sweep.
//
// # Job output
//
// A kernel (attached or detached) implements transports.JobOutputs: each shell job's
// stdout and stderr are regular files in the kernel's run directory
// (kennel-out-<32 hex>-stdout, -stderr; 0600), made by a relay (a small Python program,
// run with the probe's interpreter) in a session of its own on the kernel's connection,
// which follows them as they grow and sends them raw to the session's stdout and stderr;
// the bytes never pass through the kernel's Python or the frame channel. The files
// outlive their reader: when the controller dies the relay exits and the job writes on
// (no SIGPIPE), and a later controller's relay (JobOutputRequest.Resume) streams them
// again from their start. Past JobOutputRequest.Keep the relay punches what it sent
// (whole 64 KiB blocks), so a job's output holds about Keep of disk plus what is not sent
// yet; a resumed stream reports the punched run as its Gap. One relay reads a pair at a
// time (flock): a resume waits while an earlier relay still holds them. End makes the
// relay send each file to its end and remove both; Close leaves them. A job holds its
// session while it is streamed (sshd's MaxSessions bounds them, 10 by default); a job
// that finds none gets its output through frames.
//
// # Remote files
//
// A session whose workspace is [user@]host:/path keeps its files on that host: FS is an
// fsroot.Root over SFTP on the same connection, so fshost serves fs.read, fs.write,
// fs.edit, fs.grep and fs.glob with the same answers and refusals as for local files (one
// conformance table, fshost/fshosttest). Paths are resolved with the server's real paths,
// a dangling symlink is followed by reading it, and anything leading outside the workspace
// is refused; reads stream; FSOptions.ReadOnly refuses every change. fs.grep and fs.glob skip .git
// and what .gitignore files ignore, by the same walk as local files (ignore.WalkFS).
//
// # Detached kernels
//
// With Options.Detached the start command forks the stub into a session of its own with
// its run directory as KENNEL_KERNEL_RUN (the token follows the start block on stdin) and
// exits once kernel.sock is up; the controller then reaches the socket through the host
// connection's streamlocal forwarding (client.Dial("unix", path); the remote sshd must
// allow it) and speaks protocol 2 over it (package link). A dropped connection is
// reattached over a fresh one; a dial that fails is proof of the kernel's end only when the
// host answers that the recorded kernel no longer runs (control action ALIVE). The socket
// path must fit sun_path (108 bytes): a remote home too deep is refused with
// ErrUnsupported. Detach lets the kernel run on alone for Options.KernelGrace.
//
// # Test server
//
// Tests run against a real OpenSSH sshd (package sshtest): root logs in with a lean
// home whose profile prints a banner.
package ssh
