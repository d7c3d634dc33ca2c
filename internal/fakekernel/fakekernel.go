// Package fakekernel lets a test binary play a hostile kernel: one that breaks the
// protocol in ways the real stub never does (requests before its hello, never reading its
// stdin, closing its frame stream and running on, flooding requests), the way os/exec's
// tests make the test binary play a child.
//
// A test binary calls Main first thing in its TestMain; a test starts the fake by running
// the argv Prefix returns under the wrapped transport, which appends the kernel command
// (ignored) and sends its start block on stdin (skipped):
//
//	func TestMain(m *testing.M) {
//		if fakekernel.Main() {
//			return
//		}
//		os.Exit(m.Run())
//	}
//
//	t := wrapped.New(wrapped.Options{ArgvPrefix: fakekernel.Prefix("deaf", ""), StubDir: "/nonexistent", StubHash: hash})
//
// Every scenario says hello with the bundle hash Prefix was given, so a controller takes
// it for a current kernel.
package fakekernel

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kennel-dev/kennel/protocol"
)

const (
	envScenario = "KENNEL_FAKE_KERNEL"
	envBundle   = "KENNEL_FAKE_BUNDLE"
	envArg      = "KENNEL_FAKE_ARG"
)

// Prefix is the wrapper argv that runs this test binary as the fake kernel scenario, with
// arg for it and bundle as its hello's bundle hash. `env` execs the binary, so no process
// but the fake holds its stdout.
func Prefix(scenario, arg, bundle string) []string {
	return []string{"env", envScenario + "=" + scenario, envBundle + "=" + bundle, envArg + "=" + arg, os.Args[0]}
}

// Main runs the scenario the environment names and exits; it returns false at once when
// the process is not a fake kernel.
func Main() bool {
	name := os.Getenv(envScenario)
	if name == "" {
		return false
	}
	f, ok := scenarios[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "fakekernel: no scenario", name)
		os.Exit(2)
	}
	f(os.Getenv(envBundle), os.Getenv(envArg))
	os.Exit(0)
	return true
}

// scenarios are the fake kernels, by name. Each runs with os.Stdin and os.Stdout as the
// kernel's frame streams.
var scenarios = map[string]func(bundle, arg string){
	// early writes an fs.write of arg before its hello, then a hello, then waits.
	"early": func(bundle, arg string) {
		writeFrame(map[string]any{"event": "host_request", "id": "r1", "type": "fs.write", "cell": "", "args": map[string]any{"path": arg, "content": "written before the hello"}})
		hello(bundle, protocol.Version)
		block()
	},
	// stale says hello with another protocol, then writes an fs.write of arg.
	"stale": func(bundle, arg string) {
		hello(bundle, protocol.Version+1)
		writeFrame(map[string]any{"event": "host_request", "id": "r1", "type": "fs.write", "cell": "", "args": map[string]any{"path": arg, "content": "written by a stale kernel"}})
		block()
	},
	// deaf says hello, then never reads its stdin and ignores SIGTERM, SIGINT and SIGHUP.
	"deaf": func(bundle, arg string) {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		hello(bundle, protocol.Version)
		block()
	},
	// mute says hello, and at its first execute closes its stdout and goes on running
	// (ignoring SIGTERM and SIGHUP), answering nothing.
	"mute": func(bundle, arg string) {
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		hello(bundle, protocol.Version)
		for f := range hostFrames() {
			if f["type"] == "execute" {
				_ = os.Stdout.Close()
				block()
			}
		}
	},
	// flood says hello, writes arg ("N:SIZE") fs.write requests of SIZE bytes of content
	// back to back without waiting for a reply, then counts the replies and logs "replies
	// ok=K of N" and the first refusal.
	"flood": func(bundle, arg string) {
		var n, size int
		if _, err := fmt.Sscanf(arg, "%d:%d", &n, &size); err != nil {
			panic(err)
		}
		hello(bundle, protocol.Version)
		content := strings.Repeat("x", size)
		go func() {
			for i := range n {
				writeFrame(map[string]any{"event": "host_request", "id": fmt.Sprintf("w%d", i), "type": "fs.write", "cell": "", "args": map[string]any{"path": fmt.Sprintf("f%d", i), "content": content}})
			}
		}()
		ok, seen, first := 0, 0, ""
		for f := range hostFrames() {
			if f["type"] != "host_reply" {
				continue
			}
			seen++
			if f["status"] == "ok" {
				ok++
			} else if first == "" {
				first = fmt.Sprint(f)
			}
			if seen == n {
				writeFrame(map[string]any{"event": "log", "id": "", "level": "info", "message": fmt.Sprintf("replies ok=%d of %d %s", ok, n, first)})
			}
		}
		block()
	},
}

var stdoutMu sync.Mutex

// writeFrame writes one frame with "event", "id" and (for a host request) "type" first,
// as the stub does.
func writeFrame(m map[string]any) {
	line := "{"
	for i, k := range []string{"event", "id", "type"} {
		if v, ok := m[k]; ok {
			b, _ := json.Marshal(v)
			if i > 0 {
				line += ","
			}
			line += fmt.Sprintf("%q:%s", k, b)
			delete(m, k)
		}
	}
	if rest, _ := json.Marshal(m); len(rest) > 2 {
		line += "," + string(rest[1:])
	} else {
		line += "}"
	}
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	_, _ = os.Stdout.WriteString(line + "\n")
}

func hello(bundle string, version int) {
	writeFrame(map[string]any{"event": "hello", "id": "", "protocol": version, "pid": os.Getpid(), "pgid": syscall.Getpgrp(), "python": "3.11.7", "bundle": bundle})
}

// hostFrames yields every line of stdin that decodes as a host frame, after the start
// block the transport sends first (a 4-byte big-endian length and that many bytes) and
// the stub bundle that may follow it.
func hostFrames() func(func(map[string]any) bool) {
	return func(yield func(map[string]any) bool) {
		r := bufio.NewReaderSize(os.Stdin, 1<<20)
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return
		}
		if _, err := r.Discard(int(binary.BigEndian.Uint32(n[:]))); err != nil {
			return
		}
		for {
			line, err := r.ReadBytes('\n')
			// The stub bundle a transport may send after the start block ends without a
			// newline: the first frame then follows it on the same line.
			if i := bytes.Index(line, []byte(`{"type":`)); i > 0 {
				line = line[i:]
			}
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["type"] != nil {
				if !yield(m) {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
}

// block waits forever (a bare select{} would be the runtime's deadlock, ending the fake).
func block() {
	for {
		time.Sleep(time.Hour)
	}
}
