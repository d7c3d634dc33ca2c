package ssh

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzParseTarget: a parsed target never yields a host or user that could be read as an
// option or hold whitespace, and every refusal is ErrInvalidTarget.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"host", "me@host:22", "[::1]:2222", "-oProxyCommand=x", "a@b@c", "h:0", "h:65536", "[::1", "u@:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, h, p, err := ParseTarget(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("%q: %v not ErrInvalidTarget", s, err)
			}
			return
		}
		if h == "" || strings.HasPrefix(h, "-") || strings.HasPrefix(u, "-") || strings.ContainsAny(h+u, " \t\n/") || p < 0 || p > 65535 {
			t.Fatalf("%q parsed to user %q host %q port %d", s, u, h, p)
		}
	})
}

// FuzzSentinelReader: whatever a profile prints before the sentinel, the reader returns
// exactly what follows it.
func FuzzSentinelReader(f *testing.F) {
	f.Add([]byte("banner\n"), []byte(`{"event":"hello"}`+"\n"))
	f.Add([]byte(""), []byte("x"))
	f.Add([]byte("no newline"), []byte(""))
	f.Fuzz(func(t *testing.T, pre, body []byte) {
		if bytes.Contains(pre, []byte(sentinel)) {
			return
		}
		in := append(append(append([]byte{}, pre...), sentinel+"\n"...), body...)
		got, err := io.ReadAll(newSentinelReader(bytes.NewReader(in)))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("pre %q body %q: got %q, %v", pre, body, got, err)
		}
	})
}
