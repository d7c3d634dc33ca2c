package wrapped

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
)

func helloTime(t *testing.T, argv []string, stdin []byte, env []string) time.Duration {
	t0 := time.Now()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = env
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadSlice('\n')
	d := time.Since(t0)
	if err != nil || len(line) < 10 {
		t.Fatal(err, string(line))
	}
	cmd.Process.Kill()
	cmd.Wait()
	return d
}

func TestZZLoader(t *testing.T) {
	py := "/usr/bin/python3"
	b, _ := images.Stub()
	dir, _ := b.Unpack(t.TempDir())
	payload, _ := b.BootstrapPayload()
	block, _ := encodeStart("/", nil)
	cases := map[string]struct {
		argv  []string
		stdin []byte
	}{
		"stubdir":         {images.KernelArgv(py, dir), nil},
		"prelude+stubdir": {command(py, must(bootProgram(images.KernelArgv(py, dir))), dir, nil, true), block},
		"prelude+loader":  {command(py, loader, b.Hash(), nil, true), append(block, payload...)},
		"images-boot":     {b.BootstrapArgv(py), payload},
	}
	cases["prelude+stubdir"] = struct {
		argv  []string
		stdin []byte
	}{[]string{py, "-I", "-S", "-c", prelude + "\n" + images.KernelArgv(py, dir)[4], dir}, block}
	res := map[string][]time.Duration{}
	for i := 0; i < 80; i++ {
		for name, c := range cases {
			res[name] = append(res[name], helloTime(t, c.argv, c.stdin, []string{"KENNEL_KERNEL_BUNDLE=" + b.Hash()}))
		}
	}
	for name, ds := range res {
		slices.Sort(ds)
		t.Logf("%-16s min %6.2fms p25 %6.2fms median %6.2fms", name, float64(ds[0].Microseconds())/1000, float64(ds[len(ds)/4].Microseconds())/1000, float64(ds[len(ds)/2].Microseconds())/1000)
	}
}

func must(p, a string, err error) string { return p }
