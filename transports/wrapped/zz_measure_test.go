package wrapped_test

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
	"bufio"
	"io"
)

func timeHello(t *testing.T, tr transports.Transport, dir string) time.Duration {
	t0 := time.Now()
	k, err := tr.Start(context.Background(), transports.Spec{SessionID: "m", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(k.Stdout()).ReadSlice('\n')
	d := time.Since(t0)
	if err != nil || len(line) < 10 {
		t.Fatal(err)
	}
	k.Stdin().Close()
	k.Wait()
	io.Copy(io.Discard, k.Stdout())
	return d
}

func timeCmd(t *testing.T, argv ...string) time.Duration {
	t0 := time.Now()
	if err := exec.Command(argv[0], argv[1:]...).Run(); err != nil {
		t.Fatal(err)
	}
	return time.Since(t0)
}

func TestZZMeasure(t *testing.T) {
	py := "/usr/bin/python3"
	bu, _ := images.Stub()
	sd, _ := bu.Unpack(t.TempDir())
	trs := map[string]transports.Transport{
		"local":   local.New(local.Options{CacheDir: t.TempDir(), Python: py}),
		"setsid":  wrapped.New(wrapped.Options{ArgvPrefix: wrappedtest.SetsidPrefix(t), Python: py}),
		"noprefix": wrapped.New(wrapped.Options{Python: py}),
		"inherit": wrapped.New(wrapped.Options{Python: py, InheritWrapperEnv: true}),
		"stubdir": wrapped.New(wrapped.Options{ArgvPrefix: wrappedtest.SetsidPrefix(t), Python: py, StubDir: sd}),
	}
	cmds := map[string][]string{
		"pass":        {py, "-I", "-S", "-c", "pass"},
		"setsid-pass": {"setsid", "-w", "sh", "-c", `exec "$@"`, "--", "env", "-i", "PATH=/usr/bin", py, "-I", "-S", "-c", "pass"},
	}
	dir := t.TempDir()
	res := map[string][]time.Duration{}
	for name, tr := range trs {
		timeHello(t, tr, dir)
		_ = name
	}
	for i := 0; i < 60; i++ {
		for name, tr := range trs {
			res[name] = append(res[name], timeHello(t, tr, dir))
		}
		for name, c := range cmds {
			res[name] = append(res[name], timeCmd(t, c...))
		}
	}
	for name, ds := range res {
		slices.Sort(ds)
		t.Logf("%-12s min %6.2fms p25 %6.2fms median %6.2fms", name, ms(ds[0]), ms(ds[len(ds)/4]), ms(ds[len(ds)/2]))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
