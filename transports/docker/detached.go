package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/linked"
)

// ContainerRunRoot is where a detached kernel's run directory is mounted in its
// container: ContainerRunRoot/<id>.
const ContainerRunRoot = "/run/kennel"

// LabelDetached marks the container of a detached kernel: it outlives its controller, so
// no sweep of a dead controller's containers takes it.
const LabelDetached = "dev.kennel.detached"

// detachedKernel is a run-mode kernel reached over kernel.sock in its bind-mounted run
// directory.
type detachedKernel struct {
	*linked.Streams
	client *link.Client
	info   transports.Info
	runDir string
	watch  *transports.Watch
}

func (t *Transport) startDetached(ctx context.Context, bc bundleCache, spec transports.Spec) (_ transports.Kernel, err error) {
	image, err := t.Image()
	if err != nil {
		return nil, err
	}
	if _, err := kernelimage.Check(ctx, t.cli, image, bc.bundle); err != nil {
		return nil, err
	}
	uid, gid, err := numericUser(t.opts.UserFor(spec.Dir))
	if err != nil {
		return nil, err
	}
	idb := make([]byte, 8)
	tok := make([]byte, 32)
	if _, err := rand.Read(idb); err != nil {
		return nil, err
	}
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	kid, token := hex.EncodeToString(idb), hex.EncodeToString(tok)
	if err := os.MkdirAll(t.opts.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("run directory root: %w", err)
	}
	runDir := filepath.Join(t.opts.RunDir, kid)
	if err := os.Mkdir(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(runDir)
		}
	}()
	if err := os.Chown(runDir, uid, gid); err != nil {
		return nil, fmt.Errorf("give the run directory to the kernel's user %d:%d (a detached Docker kernel needs a controller that may chown): %w", uid, gid, err)
	}
	opts := t.createOptions(image, bc.bundle, spec)
	inside := path.Join(ContainerRunRoot, kid)
	opts.Config.Env = t.env(bc.bundle, spec, "", inside)
	opts.Config.AttachStdout = false // the kernel's stderr is read until its kernel.log takes over
	for k := range opts.Config.Labels {
		if strings.HasPrefix(k, LabelController) {
			delete(opts.Config.Labels, k) // no controller's: it outlives this one
		}
	}
	opts.Config.Labels[LabelDetached] = "1"
	opts.HostConfig.AutoRemove = true
	opts.HostConfig.Mounts = append(opts.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: runDir, Target: inside})
	id, att, err := t.launch(ctx, opts, client.ContainerAttachOptions{Stream: true, Stdin: true, Stderr: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.removeSoon(ctx, id)
		}
	}()
	// The token is the one line the kernel reads from its stdin; the stream then closes.
	_, werr := io.WriteString(att.Conn, token+"\n")
	_ = att.CloseWrite()
	defer att.Close()
	if werr != nil {
		return nil, fmt.Errorf("hand the token to container %.12s: %w", id, werr)
	}
	// What the kernel says on stderr before its kernel.log takes over: a failed start's why.
	early := &headBuffer{limit: 4096}
	go func() { _, _ = stdcopy.StdCopy(io.Discard, early, att.Reader) }()
	exited := make(chan struct{})
	var exit transports.Exit
	var waitErr error
	go func() {
		defer close(exited)
		w := t.cli.ContainerWait(context.Background(), id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case r := <-w.Result:
			exit.Code = int(r.StatusCode)
		case err := <-w.Error:
			if !errors.Is(err, io.EOF) {
				waitErr = fmt.Errorf("wait container %.12s: %w", id, err)
			}
		}
	}()
	launch := linked.NewLaunch(filepath.Join(runDir, "kernel.sock"), exited)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := link.Open(lctx, link.Options{
		Kernel: kid, Token: token, Grace: kernelGrace(t.opts.KernelGrace), Dial: launch.Dial,
		Backoff: link.Backoff{First: 5 * time.Millisecond, Max: 100 * time.Millisecond, Tries: 300},
	})
	if err != nil {
		select { // let the stderr of a kernel that ended arrive
		case <-exited:
			time.Sleep(100 * time.Millisecond)
		case <-time.After(time.Second):
		}
		log, _ := os.ReadFile(filepath.Join(runDir, "kernel.log"))
		select {
		case <-exited:
			if exit.Code == 126 || exit.Code == 127 { // the interpreter could not be run
				err = fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
			}
		default:
		}
		return nil, fmt.Errorf("attach to detached kernel in container %.12s: %w (stderr %q, kernel.log %q)", id, err, early.String(), log)
	}
	launch.Started()
	k := &detachedKernel{client: cl, runDir: runDir, info: transports.Info{Transport: Name, ID: id}}
	k.Streams = linked.New(cl)
	stop := int(math.Ceil(transports.ResolveGrace(t.opts.StopGrace).Seconds()))
	if t.opts.StopGrace < 0 {
		stop = 0
	}
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("detached docker kernel %.12s", id),
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: transports.ResolveGrace(t.opts.StdinGrace)},
			{Act: func() {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					_, _ = t.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &stop})
				}()
			}, Grace: time.Duration(stop+2) * time.Second},
			{Act: func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = remove(ctx, t.cli, id)
			}},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			<-exited
			return exit, waitErr
		},
		Release: func(_ transports.Exit, err error) error {
			cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := remove(ctx, t.cli, id); rerr != nil && err == nil {
				err = rerr
			}
			_ = os.RemoveAll(runDir)
			return err
		},
	})
	return k, nil
}

// numericUser reads "uid:gid" (or "uid", the gid then the same).
func numericUser(user string) (int, int, error) {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		g = u
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("%w: a detached Docker kernel needs a numeric user (uid:gid), not %q", transports.ErrUnavailable, user)
	}
	return uid, gid, nil
}

func kernelGrace(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return time.Hour
}

// Info reports the container's id; its pids are not the host's.
func (k *detachedKernel) Info() transports.Info { return k.info }

// Kill ends the kernel: shutdown over the link, then the container's stop (TERM, then
// KILL after StopGrace), then its removal; confirmed by the container's end.
func (k *detachedKernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// Wait blocks until the container has stopped and is removed.
func (k *detachedKernel) Wait() (transports.Exit, error) { return k.watch.Wait() }

// Detach closes the link; the kernel and its container run on for its grace.
func (k *detachedKernel) Detach() error { return k.client.Close() }

// Link is the kernel's link.
func (k *detachedKernel) Link() *link.Client { return k.client }

// headBuffer keeps the first limit bytes written to it; safe for concurrent use.
type headBuffer struct {
	mu    sync.Mutex
	limit int
	b     []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.limit - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}
