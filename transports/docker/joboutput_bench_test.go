package docker_test

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports/docker"
)

// benchJobBytes is what each job of the job-output benchmarks writes.
const benchJobBytes = 256 << 20

// benchJobCommand writes benchJobBytes.
const benchJobCommand = "head -c 256M /dev/zero"

// BenchmarkContainerJobOutput: job output from a container kernel (locked down, another
// uid than the controller's) to the controller's capture: a shell job `head -c 256M
// /dev/zero`, its stdout a FIFO in the session's FIFO directory, bind-mounted into the
// container, that the controller reads; from RunJob to the job's settled end with every
// byte counted. Compare with BenchmarkContainerExecCat (the same bytes out of the same
// container through the engine) and BenchmarkHostCatPipe, in the same run.
func BenchmarkContainerJobOutput(b *testing.B) {
	s := startJobSession(b, docker.Options{}, 0)
	benchJobs(b, s)
}

// BenchmarkContainerJobOutputFrames is BenchmarkContainerJobOutput with the kernel's FIFO
// opens refused (a cell makes its stub's opener fail): the output goes through job_output
// frames, as it did before the FIFO directory was mounted.
func BenchmarkContainerJobOutputFrames(b *testing.B) {
	s := startJobSession(b, docker.Options{}, 0)
	execCell(b, s, `import kennel._jobs as _j
_j._open_fifos = lambda job_id, out, err: (None, "refused by the benchmark")`)
	benchJobs(b, s)
}

func benchJobs(b *testing.B, s *controller.Session) {
	b.SetBytes(benchJobBytes)
	for b.Loop() {
		benchJob(b, s)
	}
}

// BenchmarkContainerExecCat is the baseline on the same transport: `head -c 256M
// /dev/zero | cat` run in a kernel's container (the same image and lock-down) as an exec,
// its stdout read to the end in this process through the engine's attach stream, as a
// Docker client reads a container process's output.
func BenchmarkContainerExecCat(b *testing.B) {
	s := startJobSession(b, docker.Options{}, 0)
	execCat := execCatIn(b, s)
	b.SetBytes(benchJobBytes)
	for b.Loop() {
		execCat()
	}
}

// BenchmarkHostCatPipe is the host's own pipe, for reference: `head -c 256M /dev/zero |
// cat` on this host, its stdout read to the end in this process (controller's
// BenchmarkCatPipe).
func BenchmarkHostCatPipe(b *testing.B) {
	b.SetBytes(benchJobBytes)
	for b.Loop() {
		hostCat(b)
	}
}

// BenchmarkContainerJobOutputVsCat runs BenchmarkContainerJobOutput's job,
// BenchmarkContainerExecCat's exec and BenchmarkHostCatPipe's pipe once each per
// iteration, their order rotating, so that the machine's load hits all three alike; it
// reports each one's median throughput and the job's over each baseline's.
func BenchmarkContainerJobOutputVsCat(b *testing.B) {
	s := startJobSession(b, docker.Options{}, 0)
	execCat := execCatIn(b, s)
	runs := []func(){
		func() { benchJob(b, s) },
		execCat,
		func() { hostCat(b) },
	}
	took := make([][]time.Duration, len(runs))
	for i := range b.N {
		for k := range runs {
			r := (i + k) % len(runs)
			t0 := time.Now()
			runs[r]()
			took[r] = append(took[r], time.Since(t0))
		}
	}
	mbps := make([]float64, len(runs))
	for r, ds := range took {
		slices.Sort(ds)
		mbps[r] = float64(benchJobBytes) / ds[len(ds)/2].Seconds() / 1e6
	}
	b.ReportMetric(mbps[0], "job-MB/s")
	b.ReportMetric(mbps[1], "execcat-MB/s")
	b.ReportMetric(mbps[2], "hostcat-MB/s")
	b.ReportMetric(mbps[0]/mbps[1], "job/execcat")
	b.ReportMetric(mbps[0]/mbps[2], "job/hostcat")
}

// benchJob runs one benchJobCommand job in s to its end.
func benchJob(b *testing.B, s *controller.Session) {
	_, st, _ := settleJob(b, s, benchJobCommand, controller.JobOptions{}, 5*time.Minute)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || st.Output.TotalBytes != benchJobBytes {
		b.Fatalf("job did not settle with exit 0 and all its bytes: %+v, %d bytes", st.End, st.Output.TotalBytes)
	}
}

// execCatIn returns a run of `head -c 256M /dev/zero | cat` as an exec in s's kernel's
// container, read to the end.
func execCatIn(b *testing.B, s *controller.Session) func() {
	cli := dockerneed.KernelEngine(b)
	execCell(b, s, "pass") // the kernel runs
	_, info, _ := s.Kernel()
	ctx := context.Background()
	return func() {
		ex, err := cli.ExecCreate(ctx, info.ID, client.ExecCreateOptions{
			Cmd: []string{"sh", "-c", benchJobCommand + " | cat"}, AttachStdout: true, AttachStderr: true,
		})
		if err != nil {
			b.Fatal(err)
		}
		att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n, err := stdcopy.StdCopy(countWriter{}, io.Discard, att.Reader)
		att.Close()
		if err != nil || n != benchJobBytes {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
}

// hostCat runs `head -c 256M /dev/zero | cat` on this host, read to the end.
func hostCat(b *testing.B) {
	buf := make([]byte, 64<<10)
	cmd := exec.Command("sh", "-c", benchJobCommand+" | cat")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	n, err := io.CopyBuffer(io.Discard, out, buf)
	if err != nil || n != benchJobBytes {
		b.Fatalf("read %d bytes: %v", n, err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
}

// countWriter discards what it is given (stdcopy counts it).
type countWriter struct{}

func (countWriter) Write(p []byte) (int, error) { return len(p), nil }
