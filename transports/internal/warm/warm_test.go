package warm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// fake is a ready kernel of a test: it ends when end is closed.
type fake struct {
	n         int
	end       chan struct{}
	discarded atomic.Int32
}

func (f *fake) Exited() <-chan struct{} { return f.end }
func (f *fake) Discard(context.Context) { f.discarded.Add(1) }
func (f *fake) String() string          { return fmt.Sprint("fake ", f.n) }
func (f *fake) kill()                   { close(f.end) }

// starter makes fakes, failing the starts fail names (by their number, from 1).
type starter struct {
	mu    sync.Mutex
	made  []*fake
	tries int
	fail  map[int]bool
}

func (s *starter) start(ctx context.Context) (*fake, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	if s.fail[s.tries] {
		return nil, errors.New("no")
	}
	f := &fake{n: s.tries, end: make(chan struct{})}
	s.made = append(s.made, f)
	return f, nil
}

func waitStats(t *testing.T, p *Pool[*fake], ok func(s statsView) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := p.Stats()
		if ok(statsView{s.Ready, s.Hits, s.Misses, s.Refills, s.Failures}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool stats %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}

type statsView struct {
	ready                           int
	hits, misses, refills, failures uint64
}

// TestAPoolFillsHandsOutOnceAndReplaces: a pool fills to its size; each Take hands out a
// kernel once and the pool refills; a ready kernel that ends is dropped (discarded) and
// replaced; with none ready a Take is a miss; Failed turns a hit into a miss and a
// failure; Close discards the ready kernels and nothing handed out.
func TestAPoolFillsHandsOutOnceAndReplaces(t *testing.T) {
	s := &starter{}
	p := New(Options[*fake]{Kind: "test", Size: 2, Start: s.start})
	waitStats(t, p, func(v statsView) bool { return v.ready == 2 && v.refills == 2 })

	a, ok := p.Take("")
	if !ok {
		t.Fatal("no kernel from a full pool")
	}
	waitStats(t, p, func(v statsView) bool { return v.ready == 2 && v.refills == 3 && v.hits == 1 })
	b, _ := p.Take("")
	if a == b {
		t.Fatal("one kernel handed out twice")
	}
	waitStats(t, p, func(v statsView) bool { return v.ready == 2 })

	// A ready kernel that ends is dropped and replaced.
	s.mu.Lock()
	victim := s.made[len(s.made)-1]
	s.mu.Unlock()
	victim.kill()
	waitStats(t, p, func(v statsView) bool { return v.ready == 2 && v.refills == 5 })
	if victim.discarded.Load() != 1 {
		t.Errorf("an ended ready kernel was discarded %d times", victim.discarded.Load())
	}

	if _, ok := p.Take("another description"); ok {
		t.Fatal("a kernel handed out to a session of another description")
	}
	c, _ := p.Take("")
	p.Failed(c, errors.New("could not mount"))
	if c.discarded.Load() != 1 {
		t.Error("a kernel that could not be handed out was not discarded")
	}
	waitStats(t, p, func(v statsView) bool { return v.hits == 2 && v.misses == 2 && v.failures == 1 })

	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.made {
		want := int32(1)
		if f == a || f == b {
			want = 0 // handed out: the session's
		}
		if got := f.discarded.Load(); got != want {
			t.Errorf("%s discarded %d times, want %d", f, got, want)
		}
	}
	if _, ok := p.Take(""); ok {
		t.Error("a closed pool handed out a kernel")
	}
}

// TestAFailedStartIsCountedAndTriedAgain: a start that fails is a failure, and the pool
// tries again (after its backoff) until it is full.
func TestAFailedStartIsCountedAndTriedAgain(t *testing.T) {
	s := &starter{fail: map[int]bool{1: true}}
	p := New(Options[*fake]{Kind: "test", Size: 1, Start: s.start})
	defer p.Close(context.Background())
	waitStats(t, p, func(v statsView) bool { return v.ready == 1 && v.failures == 1 && v.refills == 1 })
}

// TestCloseEndsAStartUnderWay: Close cancels the start's context and waits for it.
func TestCloseEndsAStartUnderWay(t *testing.T) {
	began := make(chan struct{})
	p := New(Options[*fake]{Kind: "test", Size: 1, Start: func(ctx context.Context) (*fake, error) {
		close(began)
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	<-began
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestALostKernelGoesColdUnlessColdWouldFailAlike: Lost counts a hit as a miss and a
// failure and discards nothing (its transport has); it answers nil (start cold) for an
// ordinary loss, and the error when the caller's ctx has ended or the error says a cold
// start would fail alike (errdefs.ErrUnavailable).
func TestALostKernelGoesColdUnlessColdWouldFailAlike(t *testing.T) {
	s := &starter{}
	p := New(Options[*fake]{Kind: "test", Key: "k", Size: 1, Start: s.start})
	defer p.Close(context.Background())
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	lost := errors.New("its link never answered")
	unavailable := fmt.Errorf("no interpreter: %w", errdefs.ErrUnavailable)
	for i, c := range []struct {
		ctx  context.Context
		err  error
		want error
	}{
		{context.Background(), lost, nil},
		{ended, lost, lost},
		{context.Background(), unavailable, unavailable},
	} {
		waitStats(t, p, func(s statsView) bool { return s.ready == 1 })
		f, ok := p.Take("k")
		if !ok {
			t.Fatalf("case %d: no ready kernel taken", i)
		}
		if got := p.Lost(c.ctx, f, c.err); got != c.want {
			t.Errorf("case %d: Lost(%v) = %v, want %v", i, c.err, got, c.want)
		}
		if n := f.discarded.Load(); n != 0 {
			t.Errorf("case %d: Lost discarded the kernel %d times; its transport does", i, n)
		}
		if st := p.Stats(); st.Hits != 0 || st.Misses != uint64(i+1) || st.Failures != uint64(i+1) {
			t.Errorf("case %d: after Lost: %+v", i, st)
		}
	}
}
