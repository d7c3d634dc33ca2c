package images

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestHelloFields(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	b, _ := stubDir(t)
	h := k.hello
	if h.ID != "" {
		t.Errorf("hello id = %q, want empty", h.ID)
	}
	if got := num(t, h.M["protocol"]); got != 1 {
		t.Errorf("protocol = %d, want 1", got)
	}
	pid := k.cmd.Process.Pid
	if got := num(t, h.M["pid"]); got != pid {
		t.Errorf("pid = %d, want %d", got, pid)
	}
	if got := num(t, h.M["pgid"]); got != pid {
		t.Errorf("pgid = %d, want %d (the kernel leads its own group)", got, pid)
	}
	if v := h.str("python"); !regexp.MustCompile(`^3\.\d+\.\d+$`).MatchString(v) {
		t.Errorf("python = %q", v)
	}
	if got := h.str("bundle"); got != b.Hash() {
		t.Errorf("bundle = %q, want %q", got, b.Hash())
	}
	// The hello is the whole first line, in the documented key order.
	want := `{"event":"hello","id":"","protocol":1,"pid":` + strconv.Itoa(pid)
	if !strings.HasPrefix(string(h.Raw), want) {
		t.Errorf("hello = %s, want prefix %s", h.Raw, want)
	}
}

func TestHelloWithoutBundleEnvSaysEmpty(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{EnvBundle + "=not-hex\"},\"x\":{"}})
	if got := k.hello.str("bundle"); got != "" {
		t.Errorf("bundle = %q, want empty for a bad value", got)
	}
}

func TestFinalExpressionIsResult(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	if got := k.result("c1", "x = 6*7"); got != "<null>" {
		t.Errorf("assignment result = %s, want null", got)
	}
	if got := k.result("c2", "x"); got != "42" {
		t.Errorf("x = %s, want 42", got)
	}
	cases := []struct{ code, want string }{
		{"None", "<null>"},
		{"'a'", "'a'"},
		{"1; 2", "2"},
		{"y = 1\ny + 1", "2"},
		{"if True:\n    3", "<null>"},
		{"def f():\n    return 5\nf()", "5"},
		{"[x, 'é']", "[42, 'é']"},
		{"_", "[42, 'é']"},
		{"__name__", "'__main__'"},
		{"kennel.__name__", "'kennel'"},
		{"import sys; sys.modules['__main__'].x", "42"},
		{"# only a comment", "<null>"},
		{"", "<null>"},
	}
	for i, c := range cases {
		if got := k.result("r"+strconv.Itoa(i), c.code); got != c.want {
			t.Errorf("cell %q: result %s, want %s", c.code, got, c.want)
		}
	}
}

func TestPrintStreamsBeforeDone(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	before, done := k.execute("c1", "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\nsys.stdout.buffer.write('caf\\xc3\\xa9\\n'.encode('latin-1'))\n7")
	if got := streamText(before, "c1", "stdout"); got != "hello\ncafé\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := streamText(before, "c1", "stderr"); got != "oops\n" {
		t.Errorf("stderr = %q", got)
	}
	if done.str("status") != "ok" || done.str("result") != "7" {
		t.Errorf("done = %s", done)
	}
}

func TestFdLevelOutputIsCaptured(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	code := "import os, subprocess\nos.system('echo hi')\nos.write(1, b'raw\\n')\nos.write(2, b'err\\n')\nsubprocess.run(['sh', '-c', 'echo child; echo childerr >&2'])\n"
	before, done := k.execute("c1", code)
	if done.str("status") != "ok" {
		t.Fatalf("done = %s", done)
	}
	// Every line was a valid frame (the harness checks), so nothing came out raw; all
	// the output is the cell's, before its done.
	if got := streamText(before, "c1", "stdout"); got != "hi\nraw\nchild\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := streamText(before, "c1", "stderr"); got != "err\nchilderr\n" {
		t.Errorf("stderr = %q", got)
		for _, f := range before {
			t.Log(f)
		}
	}
}

func TestCellCannotReadTheFrames(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	// fd 0 and sys.stdin are /dev/null: a cell or its child cannot take host frames.
	got := k.result("c1", "import os, sys, subprocess\n(sys.stdin.read(), os.read(0, 100), subprocess.run(['cat'], capture_output=True).stdout)")
	if got != "('', b'', b'')" {
		t.Errorf("reads of stdin = %s", got)
	}
	if got := k.result("c2", "'still here'"); got != "'still here'" {
		t.Errorf("after = %s", got)
	}
}

func TestLargeOutputIsSplitIntoFrames(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	before, done := k.execute("c1", "import sys\nsys.stdout.write('ab\\u20ac' * 300000)\nimport os\nos.write(1, b'z' * 1500000)\nNone")
	if done.str("status") != "ok" {
		t.Fatalf("done = %s", done)
	}
	want := strings.Repeat("ab€", 300000) + strings.Repeat("z", 1500000)
	if got := streamText(before, "c1", "stdout"); got != want {
		t.Errorf("stdout: %d chars, want %d", len(got), len(want))
	}
	for _, f := range before {
		if len(f.Raw) > 16<<20 {
			t.Errorf("stream frame of %d bytes", len(f.Raw))
		}
	}
}

func TestCellErrorReport(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	_, done := k.execute("c1", "def f():\n    return 1/0\nf()")
	if done.str("status") != "error" || done.M["result"] != nil {
		t.Fatalf("done = %s", done)
	}
	e, _ := done.M["error"].(map[string]any)
	if e["ename"] != "ZeroDivisionError" || e["evalue"] != "division by zero" {
		t.Errorf("error = %v", e)
	}
	tb, _ := e["traceback"].(string)
	for _, want := range []string{"Traceback (most recent call last)", `File "<cell c1>", line 3`, "return 1/0", "ZeroDivisionError: division by zero"} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	for _, stub := range []string{"_cells.py", "_kernel.py", "_boot.py", "kennel/"} {
		if strings.Contains(tb, stub) {
			t.Errorf("traceback shows stub frame %q:\n%s", stub, tb)
		}
	}

	// A host error raised inside kennel's own code shows the cell's line, not the stub's.
	_, done = k.execute("c2", "raise ValueError('bad') from KeyError('k')")
	e, _ = done.M["error"].(map[string]any)
	tb, _ = e["traceback"].(string)
	if e["ename"] != "ValueError" || !strings.Contains(tb, "KeyError: 'k'") || strings.Contains(tb, "kennel/") {
		t.Errorf("chained error = %v", e)
	}

	_, done = k.execute("c3", "x = (")
	e, _ = done.M["error"].(map[string]any)
	if done.str("status") != "error" || e["ename"] != "SyntaxError" {
		t.Errorf("syntax error done = %s", done)
	}
	if tb, _ := e["traceback"].(string); strings.Contains(tb, "kennel/") {
		t.Errorf("syntax error traceback shows the stub:\n%s", tb)
	}

	// SystemExit and a failing repr end the cell, not the kernel.
	_, done = k.execute("c4", "import sys; sys.exit(3)")
	if e, _ := done.M["error"].(map[string]any); e["ename"] != "SystemExit" {
		t.Errorf("sys.exit done = %s", done)
	}
	_, done = k.execute("c5", "class R:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nR()")
	if e, _ := done.M["error"].(map[string]any); e["ename"] != "RuntimeError" {
		t.Errorf("bad repr done = %s", done)
	}
	if got := k.result("c6", "1+1"); got != "2" {
		t.Errorf("after errors: %s", got)
	}
}

func TestNonStringCodeFailsTheCell(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "c1", "code", 5)
	done := k.until(isDone("c1"))
	last := done[len(done)-1]
	if e, _ := last.M["error"].(map[string]any); last.str("status") != "error" || e["ename"] != "TypeError" {
		t.Errorf("done = %s", last)
	}
}

func TestCellsRunInOrderInOneNamespace(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	for i := 0; i < 20; i++ {
		k.send("execute", "c"+strconv.Itoa(i), "code", "n = globals().get('n', 0) + 1\nn")
	}
	for i := 0; i < 20; i++ {
		f := k.until(func(f frame) bool { return f.Event == "done" })
		last := f[len(f)-1]
		if last.ID != "c"+strconv.Itoa(i) || last.str("result") != strconv.Itoa(i+1) {
			t.Fatalf("done %d = %s", i, last)
		}
	}
}

func TestWorkingDirectoryIsTheKernels(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := startKernel(t, kernelOpts{dir: dir})
	want := strconv.Quote(dir)
	want = "'" + want[1:len(want)-1] + "'"
	if got := k.result("c1", "import os; os.getcwd()"); got != want {
		t.Errorf("cwd = %s, want %s", got, want)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

func TestOutputAfterACellEndsIsOwnedByNoCell(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.result("c1", "import threading, time, os\ndef late():\n    time.sleep(0.2)\n    print('late')\n    os.write(2, b'raw late\\n')\nthreading.Thread(target=late).start()")
	var stdout, stderr string
	for stdout != "late\n" || stderr != "raw late\n" {
		f := k.next()
		if f.Event != "stream" {
			continue
		}
		if f.ID != "" {
			t.Errorf("late output owned by %q: %s", f.ID, f)
		}
		if f.str("name") == "stdout" {
			stdout += f.str("text")
		} else {
			stderr += f.str("text")
		}
		if len(stdout) > 5 || len(stderr) > 9 {
			t.Fatalf("late output = %q, %q", stdout, stderr)
		}
	}
}
