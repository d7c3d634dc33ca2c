package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/transports"
)

// client speaks just enough of the kernel protocol for these tests: it reads frames in a
// goroutine and runs cells. (The full table lives in transporttest.)
type client struct {
	k      transports.Kernel
	frames chan map[string]any
	seq    int
}

func newClient(k transports.Kernel) *client {
	c := &client{k: k, frames: make(chan map[string]any, 64)}
	go func() {
		defer close(c.frames)
		sc := bufio.NewScanner(k.Stdout())
		sc.Buffer(make([]byte, 64<<10), 32<<20)
		for sc.Scan() {
			var f map[string]any
			if json.Unmarshal(sc.Bytes(), &f) == nil {
				c.frames <- f
			}
		}
	}()
	return c
}

func (c *client) next(d time.Duration) (map[string]any, error) {
	select {
	case f, ok := <-c.frames:
		if !ok {
			return nil, fmt.Errorf("kernel stdout ended")
		}
		return f, nil
	case <-time.After(d):
		return nil, fmt.Errorf("no frame within %v", d)
	}
}

func (c *client) hello() (map[string]any, error) {
	f, err := c.next(30 * time.Second)
	if err != nil {
		return nil, err
	}
	if f["event"] != "hello" {
		return nil, fmt.Errorf("first frame %v is not a hello", f)
	}
	return f, nil
}

// send writes an execute frame and returns its id.
func (c *client) send(code string) (string, error) {
	c.seq++
	id := "c" + strconv.Itoa(c.seq)
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Code string `json:"code"`
	}{"execute", id, code})
	_, err := c.k.Stdin().Write(append(b, '\n'))
	return id, err
}

// run executes a cell that must succeed and returns what it printed.
func (c *client) run(code string) (string, error) {
	id, err := c.send(code)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for {
		f, err := c.next(30 * time.Second)
		if err != nil {
			return "", err
		}
		if f["id"] != id {
			continue
		}
		switch f["event"] {
		case "stream":
			if f["name"] == "stdout" {
				out.WriteString(f["text"].(string))
			}
		case "done":
			if f["status"] != "ok" {
				return "", fmt.Errorf("cell %q: %v", code, f)
			}
			return out.String(), nil
		}
	}
}

// sleepersCell starts a plain, a setsid'd and a double-forked sleep 1000 and prints pids.
const sleepersCell = `import subprocess
_a = subprocess.Popen(["sleep", "1000"])
_b = subprocess.Popen(["sleep", "1000"], start_new_session=True)
_c = subprocess.run(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout.strip()
print(_a.pid, _b.pid, _c)
`

// sleepers runs sleepersCell and returns the three pids.
func (c *client) sleepers() ([]int, error) {
	out, err := c.run(sleepersCell)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("sleepers printed %q", out)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 3 {
		return nil, fmt.Errorf("sleepers printed %q", out)
	}
	return pids, nil
}

func killAndWait(k transports.Kernel) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = k.Kill(ctx)
	_, _ = k.Wait()
}
