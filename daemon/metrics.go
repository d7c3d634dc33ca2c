package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/output"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the daemon's Prometheus metrics, in a registry of its own (no global
// state).
type metrics struct {
	reg          *prometheus.Registry
	peers        prometheus.Counter
	hostRequests *prometheus.CounterVec
	frames       *prometheus.CounterVec
	fsRefused    *prometheus.CounterVec
	conflicts    prometheus.Counter
	jobBytes     *prometheus.CounterVec
	cells        *prometheus.CounterVec
	ended        prometheus.Counter
	handler      http.Handler

	// The children of jobBytes and cells every cell request counts, looked up once.
	keptBytes, droppedBytes     prometheus.Counter
	cellsSettled, cellsDetached prometheus.Counter
}

// newMetrics makes the daemon's metrics over r and pools (the Kit's warm pools, read at
// each scrape); errors of a scrape go to log.
func newMetrics(r *registry, pools func() []launch.PoolStat, log *slog.Logger) *metrics {
	m := &metrics{
		reg:          prometheus.NewRegistry(),
		peers:        counter("kennel_peers_refused_total", "Connections refused because the peer runs as another uid (or its uid could not be read)."),
		hostRequests: counterVec("kennel_host_requests_total", "Host requests the gate accepted and a handler answered, by type and result (ok or the refusal's code).", "type", "result"),
		frames:       counterVec("kennel_frames_total", "Host-request frames the gate decided on, by decision (accepted, or the refusal's code: too_large, unserved, no_type, duplicate).", "decision"),
		fsRefused:    counterVec("kennel_fs_requests_refused_total", "fs.* host requests refused, by error code.", "code"),
		conflicts:    counter("kennel_handback_conflicts_total", "Paths a hand-back kept the parent's entry for against the child's change."),
		jobBytes:     counterVec("kennel_job_output_bytes_total", "Bytes of ended jobs' output, kept in their reports or dropped by truncation.", "kind"),
		cells:        counterVec("kennel_cells_total", "Cells run through the API, by how the request ended (settled or detached).", "state"),
		ended:        counter("kennel_sessions_ended_total", "Sessions ended (deleted, handed back or shut down)."),
	}
	m.reg.MustRegister(m.peers, m.hostRequests, m.frames, m.fsRefused, m.conflicts, m.jobBytes, m.cells, m.ended,
		&sessionCollector{reg: r}, poolCollector{stats: pools})
	// A metric that cannot be gathered is logged and left out: a scrape is always a 200
	// (HTTPErrorOnError would answer a plain-text 500 the API does not document).
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: scrapeLog{log}})
	m.keptBytes, m.droppedBytes = m.jobBytes.WithLabelValues("kept"), m.jobBytes.WithLabelValues("dropped")
	m.cellsSettled, m.cellsDetached = m.cells.WithLabelValues("settled"), m.cells.WithLabelValues("backgrounded")
	return m
}

// counter and counterVec make a counter of name and help (labelled by labels).
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// scrapeLog is promhttp's error log on the daemon's logger.
type scrapeLog struct{ log *slog.Logger }

func (l scrapeLog) Println(v ...any) { l.log.Warn("metrics scrape: " + fmt.Sprint(v...)) }

func (m *metrics) peerRefused(int) { m.peers.Inc() }

// gateDecision counts one gate decision (controller.Options.OnGateDecision).
func (m *metrics) gateDecision(decision string) { m.frames.WithLabelValues(decision).Inc() }
func (m *metrics) sessionEnded()                { m.ended.Inc() }

var (
	descSessions = prometheus.NewDesc("kennel_sessions", "Sessions the daemon owns, by transport.", []string{"transport"}, nil)
	descKernels  = prometheus.NewDesc("kennel_kernels", "Kernels running now, by transport.", []string{"transport"}, nil)
)

// sessionCollector reads the sessions and kernels by transport at each scrape.
type sessionCollector struct{ reg *registry }

func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSessions
	ch <- descKernels
}

func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	sessions, kernels := map[string]int{}, map[string]int{}
	for _, e := range c.reg.list() {
		t := e.transport
		if _, info, ok := e.sess.Kernel(); ok {
			t = info.Transport
			kernels[t]++
		}
		sessions[t]++
	}
	for t, n := range sessions {
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(n), t)
	}
	for t, n := range kernels {
		ch <- prometheus.MustNewConstMetric(descKernels, prometheus.GaugeValue, float64(n), t)
	}
}

var (
	descPoolSize     = prometheus.NewDesc("kennel_pool_size", "Ready kernels a warm pool keeps, by transport.", []string{"transport"}, nil)
	descPoolReady    = prometheus.NewDesc("kennel_pool_ready", "Ready kernels a warm pool holds now, by transport.", []string{"transport"}, nil)
	descPoolHits     = prometheus.NewDesc("kennel_pool_hits_total", "Sessions a warm pool handed a ready kernel, by transport.", []string{"transport"}, nil)
	descPoolMisses   = prometheus.NewDesc("kennel_pool_misses_total", "Sessions whose kernel started cold beside a warm pool (none ready of their description), by transport.", []string{"transport"}, nil)
	descPoolHitRatio = prometheus.NewDesc("kennel_pool_hit_ratio", "Hits over hits and misses of a warm pool so far (0 before its first session), by transport.", []string{"transport"}, nil)
	descPoolRefills  = prometheus.NewDesc("kennel_pool_refills_total", "Kernels a warm pool made ready, by transport.", []string{"transport"}, nil)
	descPoolRefill   = prometheus.NewDesc("kennel_pool_refill_seconds_total", "Time a warm pool spent making its ready kernels, creation to waiting, in all, by transport.", []string{"transport"}, nil)
	descPoolLast     = prometheus.NewDesc("kennel_pool_last_refill_seconds", "Time the newest ready kernel of a warm pool took to make, by transport.", []string{"transport"}, nil)
	descPoolFailures = prometheus.NewDesc("kennel_pool_failures_total", "Kernels a warm pool failed to make ready or to hand out, by transport.", []string{"transport"}, nil)
)

// poolCollector reads the warm pools' figures at each scrape.
type poolCollector struct{ stats func() []launch.PoolStat }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolSize, descPoolReady, descPoolHits, descPoolMisses, descPoolHitRatio, descPoolRefills, descPoolRefill, descPoolLast, descPoolFailures} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.stats == nil {
		return
	}
	for _, p := range c.stats() {
		ratio := 0.0
		if n := p.Hits + p.Misses; n > 0 {
			ratio = float64(p.Hits) / float64(n)
		}
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{descPoolSize, prometheus.GaugeValue, float64(p.Size)},
			{descPoolReady, prometheus.GaugeValue, float64(p.Ready)},
			{descPoolHits, prometheus.CounterValue, float64(p.Hits)},
			{descPoolMisses, prometheus.CounterValue, float64(p.Misses)},
			{descPoolHitRatio, prometheus.GaugeValue, ratio},
			{descPoolRefills, prometheus.CounterValue, float64(p.Refills)},
			{descPoolRefill, prometheus.CounterValue, p.RefillTime.Seconds()},
			{descPoolLast, prometheus.GaugeValue, p.LastRefill.Seconds()},
			{descPoolFailures, prometheus.CounterValue, float64(p.Failures)},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, p.Kind)
		}
	}
}

// countingHandler counts the host requests a session's handler answers.
type countingHandler struct {
	h controller.HostHandler
	m *metrics
}

func (c countingHandler) Serves(typ string) bool { return c.h.Serves(typ) }

func (c countingHandler) Serve(ctx context.Context, typ string, args json.RawMessage) (any, error) {
	res, err := c.h.Serve(ctx, typ, args)
	result := "ok"
	if err != nil {
		result = "internal"
		var coder interface{ Code() string }
		if errors.As(err, &coder) {
			result = coder.Code()
		}
		if strings.HasPrefix(typ, "fs.") {
			c.m.fsRefused.WithLabelValues(result).Inc()
		}
	}
	c.m.hostRequests.WithLabelValues(typ, result).Inc()
	return res, err
}

// account counts an ended job's kept and dropped bytes once.
func (s *Server) account(e *entry, j *jobs.Job) {
	if _, ended := j.End(); !ended || !e.firstAccount(j.ID()) {
		return
	}
	s.countBytes(j.Snapshot().Output)
}

// accountSettled counts the bytes of a job a wait saw settle, out being its settled
// output, once.
func (s *Server) accountSettled(e *entry, id jobs.ID, out output.Result) {
	if e.firstAccount(id) {
		s.countBytes(out)
	}
}

// countBytes counts an ended job's kept and dropped bytes.
func (s *Server) countBytes(out output.Result) {
	s.metrics.keptBytes.Add(float64(out.KeptBytes))
	s.metrics.droppedBytes.Add(float64(out.DroppedBytes))
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.handler.ServeHTTP(w, r)
}
