package wrapped

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// envEntry draws a KEY=VALUE entry: any bytes but NUL in the value, '=' included.
func envEntry() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		key := rapid.StringMatching(`[A-Za-z_][A-Za-z0-9_]{0,8}`).Draw(t, "key")
		value := rapid.SliceOfN(rapid.Byte().Filter(func(b byte) bool { return b != 0 }), 0, 40).Draw(t, "value")
		return key + "=" + string(value)
	})
}

func TestStartBlockRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dir := "/" + rapid.StringMatching(`[^\x00]{0,30}`).Draw(t, "dir")
		env := rapid.SliceOf(envEntry()).Draw(t, "env")
		tail := rapid.SliceOf(rapid.Byte()).Draw(t, "tail")
		b, err := encodeStart(dir, env)
		if err != nil {
			t.Fatalf("encode %q %q: %v", dir, env, err)
		}
		gotDir, gotEnv, rest, err := decodeStart(append(b, tail...))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if gotDir != dir || !slices.Equal(gotEnv, env) || !bytes.Equal(rest, tail) {
			t.Fatalf("round trip: %q %q %q, want %q %q %q", gotDir, gotEnv, rest, dir, env, tail)
		}
	})
}

func TestStartBlockRefusesWhatThePreludeCannotRead(t *testing.T) {
	for _, c := range []struct {
		dir string
		env []string
	}{
		{"", nil},
		{"/a\x00b", nil},
		{"/", []string{"NOEQUALS"}},
		{"/", []string{"=value"}},
		{"/", []string{"A=b\x00c"}},
		{"/", []string{"A=" + strings.Repeat("x", MaxStartBlock)}},
	} {
		if _, err := encodeStart(c.dir, c.env); !errors.Is(err, errBadBlock) {
			t.Errorf("encodeStart(%q, %.40q): %v, want errBadBlock", c.dir, c.env, err)
		}
	}
}

// FuzzDecodeStart: decoding any bytes never panics, and what decodes encodes back to the
// same block.
func FuzzDecodeStart(f *testing.F) {
	good, _ := encodeStart("/work", []string{"A=b", "PATH=/bin:/usr/bin", "E="})
	f.Add(good)
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 3, 'a', 0, 'b'})
	f.Add(append([]byte{0, 0, 0, 18}, "kennel-wrapped/1\x00\x00"...))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir, env, rest, err := decodeStart(b)
		if err != nil {
			return
		}
		again, err := encodeStart(dir, env)
		if err != nil {
			if dir == "" {
				return // the prelude reads an empty dir, and fails at chdir
			}
			t.Fatalf("decoded %q %q but cannot encode it: %v", dir, env, err)
		}
		if !bytes.Equal(append(again, rest...), b) {
			t.Fatalf("re-encoded %q, want %q", again, b)
		}
	})
}

func TestKernelEnvLayers(t *testing.T) {
	key := rapid.SampledFrom([]string{"A", "B", "PATH", images.EnvOwnerPID, images.EnvOwner,
		images.EnvBundle, images.EnvEOFGrace})
	entry := rapid.Custom(func(t *rapid.T) string {
		return key.Draw(t, "key") + "=" + rapid.StringMatching(`[a-z0-9=]{0,6}`).Draw(t, "value")
	})
	rapid.Check(t, func(t *rapid.T) {
		defaults := rapid.SliceOf(entry).Draw(t, "defaults")
		spec := rapid.SliceOf(entry).Draw(t, "spec")
		want := transporttest.EnvMap(defaults)
		for k, v := range transporttest.EnvMap(spec) {
			want[k] = v
		}
		delete(want, images.EnvOwnerPID)
		want[images.EnvOwner] = "stdin"
		if err := transporttest.CheckEnv(kernelEnv(defaults, spec), want); err != nil {
			t.Fatal(err)
		}
	})
}

// No value of Spec.Env ever appears in the argv a Start runs, whatever the values; the
// start block carries them all.
func TestArgvCarriesNoSpecValue(t *testing.T) {
	tr := New(Options{ArgvPrefix: []string{"docker", "exec", "-i", "box"}})
	bc, err := tr.bundle()
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		values := rapid.SliceOfN(rapid.StringMatching(`[a-zA-Z0-9 ./:=-]{6,30}`), 1, 5).Draw(t, "values")
		var env []string
		for i, v := range values {
			env = append(env, "K"+string(rune('A'+i))+"="+v)
		}
		dir := "/" + rapid.StringMatching(`[a-z]{6,12}`).Draw(t, "dir")
		argv, preamble, err := tr.plan(bc, specOf(dir, env), "python3")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(argv[:4], []string{"docker", "exec", "-i", "box"}) || argv[4] != "env" || argv[5] != "-i" {
			t.Fatalf("argv %q does not start with the prefix and env -i", argv[:6])
		}
		for _, a := range argv {
			for _, v := range values {
				if strings.Contains(a, v) {
					t.Fatalf("argv element %.60q holds the value %q", a, v)
				}
			}
			if strings.Contains(a, dir) {
				t.Fatalf("argv element %.60q holds the dir %q", a, dir)
			}
		}
		gotDir, gotEnv, rest, err := decodeStart(preamble)
		if err != nil || gotDir != dir || !bytes.Equal(rest, bc.payload) {
			t.Fatalf("preamble: %q, %v, rest %d bytes", gotDir, err, len(rest))
		}
		m := transporttest.EnvMap(gotEnv)
		for i, v := range values {
			if m["K"+string(rune('A'+i))] != v {
				t.Fatalf("block env %q lacks %q", gotEnv, v)
			}
		}
	})
}
