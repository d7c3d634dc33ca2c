package daemon_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/daemon"
)

// envInt reads a positive count from the environment, else def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestLoadManyClientsManyCells: clients each create a session and run cells through the
// API concurrently; every reply arrives once and matches its cell, and no kernel is left
// once the sessions are deleted. 50 clients x 200 cells by default; -short runs 5 x 20;
// KENNEL_LOAD_CLIENTS and KENNEL_LOAD_CELLS override both.
func TestLoadManyClientsManyCells(t *testing.T) {
	clients, cells := 50, 200
	if testing.Short() {
		clients, cells = 5, 20
	}
	clients, cells = envInt("KENNEL_LOAD_CLIENTS", clients), envInt("KENNEL_LOAD_CELLS", cells)
	r := serve(t, daemon.Options{})
	ctx := context.Background()

	var mu sync.Mutex
	replies := map[string]int{}
	var lat []time.Duration
	var pids []int
	var wg sync.WaitGroup
	start := time.Now()
	for k := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := r.newSession(t)
			got, err := r.c.Session(ctx, s.ID)
			if err != nil || got.Kernel.PID == nil {
				t.Errorf("client %d: %v", k, err)
				return
			}
			mu.Lock()
			pids = append(pids, *got.Kernel.PID)
			mu.Unlock()
			for i := range cells {
				code := fmt.Sprintf("print('c%d-%d')\n%d*100000+%d", k, i, k, i)
				t0 := time.Now()
				rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: code})
				d := time.Since(t0)
				if err != nil {
					t.Errorf("client %d cell %d: %v", k, i, err)
					return
				}
				want := strconv.Itoa(k*100000 + i)
				if rep.State != "settled" || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != want ||
					rep.Output.Text != fmt.Sprintf("c%d-%d\n", k, i) {
					t.Errorf("client %d cell %d: reply %+v does not match its cell", k, i, rep)
					return
				}
				mu.Lock()
				replies[fmt.Sprintf("%d/%d", k, i)]++
				lat = append(lat, d)
				mu.Unlock()
			}
			if err := r.c.DeleteSession(ctx, s.ID); err != nil {
				t.Errorf("client %d: delete: %v", k, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		return
	}
	if len(replies) != clients*cells {
		t.Fatalf("%d distinct replies, want %d", len(replies), clients*cells)
	}
	for key, n := range replies {
		if n != 1 {
			t.Fatalf("cell %s: %d replies", key, n)
		}
	}
	if l, err := r.c.Sessions(ctx); err != nil || len(l) != 0 {
		t.Fatalf("sessions left: %v %v", l, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("kernel pid %d left after its session was deleted", pid)
		}
	}
	slices.Sort(lat)
	t.Logf("%d clients x %d cells in %v: cell latency median %v, p99 %v", clients, cells, elapsed.Round(time.Millisecond),
		lat[len(lat)/2], lat[len(lat)*99/100])
}
