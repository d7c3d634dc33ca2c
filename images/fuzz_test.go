package images

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
)

// safeHostLine makes a fuzzed line safe to feed a real kernel: a line the Go decoder
// reads as an object of a type that runs code, starts jobs or ends the kernel is
// dropped; a line Go cannot read (Python might: NaN) is made unreadable to both. What
// is left exercises the stub's reading and dispatch of hostile lines.
func safeHostLine(line []byte) ([]byte, bool) {
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return append([]byte("#"), line...), true
	}
	switch typ, _ := m["type"].(string); typ {
	case "execute", "job_run", "shutdown":
		return nil, false
	}
	return line, true
}

// FuzzHostFrames feeds arbitrary lines to one real kernel. The law: whatever the host
// writes, every line the kernel writes is a frame with "event" and "id" first, and the
// kernel still runs the next cell.
func FuzzHostFrames(f *testing.F) {
	seeds := []string{
		`{"type":"interrupt","id":"c1"}`,
		`{"type":"host_reply","id":"h1","status":"ok","result":{"a":[1,2]}}`,
		`{"type":"host_reply","id":"h1","status":"duplicate","error":{"code":"duplicate"}}`,
		`{"type":"host_reply","id":"h1","status":"error","error":"x"}`,
		`{"type":"job_kill","id":"j1","signal":9}`,
		`{"type":"job_kill","id":"j1","signal":1e400}`,
		`{"type":"call","id":"r1","module":"m","function":"f","args":{}}`,
		`{"type":"interrupt","id":["x"]}`,
		`{"type":null}`,
		`{"type":"execute","id":"x","code":"1","n":NaN}`,
		"\xff\xfe\xfd",
		`{"id":"\ud800"}`,
		`[]`, `""`, `1`, `{}`, ``, `{"type":"host_reply"`,
		strings.Repeat("[", 100000),
		`{"type":"host_reply","id":"h1","status":"ok","result":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	k := startKernel(f, kernelOpts{})
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		k.t = t
		defer func() { k.t = f }()
		var input bytes.Buffer
		for _, line := range bytes.Split(data, []byte("\n")) {
			if safe, ok := safeHostLine(line); ok {
				input.Write(safe)
				input.WriteByte('\n')
			}
		}
		if _, err := k.stdin.Write(input.Bytes()); err != nil {
			t.Fatalf("kernel gone: %v", err)
		}
		n++
		id := "probe" + strconv.Itoa(n)
		k.send("execute", id, "code", "'alive'")
		got := k.until(isDone(id))
		if done := got[len(got)-1]; done.str("result") != "'alive'" {
			t.Fatalf("probe after %q: %s", data, done)
		}
	})
}

// FuzzBundle: any set of paths and contents either is refused with ErrBadPath or gives a
// bundle whose hash is stable and whose zip holds exactly its files.
func FuzzBundle(f *testing.F) {
	f.Add("kennel/__init__.py", []byte("x"), "kennel/fs.py", []byte(""))
	f.Add("a", []byte("b"), "a/b", []byte("c"))
	f.Add("../x", []byte{}, "x", []byte{0})
	f.Add("é/ü", []byte{255}, "a\x00", []byte{})
	f.Fuzz(func(t *testing.T, p1 string, d1 []byte, p2 string, d2 []byte) {
		b, err := NewBundle([]File{{Path: p1, Data: d1}, {Path: p2, Data: d2}})
		if err != nil {
			return
		}
		again, _ := NewBundle([]File{{Path: p2, Data: d2}, {Path: p1, Data: d1}})
		if again.Hash() != b.Hash() {
			t.Fatal("hash depends on order")
		}
		z, err := b.Zip()
		if err != nil {
			t.Fatal(err)
		}
		r, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
		if err != nil {
			t.Fatal(err)
		}
		var files []File
		for _, zf := range r.File {
			rc, err := zf.Open()
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, File{Path: zf.Name, Data: data})
		}
		if hashFiles(files) != b.Hash() {
			t.Fatal("zip does not hold the bundle")
		}
	})
}
