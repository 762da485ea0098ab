package agentapi

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
)

// The socket speaks HTTP/1.1:
//
//	GET /v1/qp-leaks?dev=D&min_age=5s&rule=R&rule=R2&max_qp=D=N&no_probes=1&limit=N
//	GET /v1/status
//
// Both answer a JSON object. /v1/qp-leaks returns the CheckReport that
// `rdmatool qp-leaks -j` prints, with "source":"agent"; every parameter is
// optional (min_age defaults to 5s, like the CLI). Errors are one JSON
// object, {"error":"..."}: 400 for a bad or malformed query, 404 for a
// device the agent does not see or a path it does not serve (paths are
// taken as they come, never cleaned or redirected), 405 with Allow: GET,
// HEAD for another method, 503 for a device asked about while the agent
// cannot list the devices at all (the listing's error). Values quoted back in an error are cut at
// 64 bytes (query.Quote); package query reads the parameters.

// DefaultSocket is where the agent listens and the CLI asks.
const DefaultSocket = "/run/rdmatool/agent.sock"

// MaxSocketPath is the longest path a unix socket can be bound to or
// connected at: sun_path (108 bytes, include/uapi/linux/un.h) less the
// NUL.
const MaxSocketPath = 107

// CheckSocketPath refuses a path no agent can listen on and no client
// connect at: one with a NUL byte, or longer than MaxSocketPath bytes. It
// is the check of the agent's socket (its flag and its configuration's
// key) and of the socket a client asks; "" passes, for the caller to say
// what it means. The error says why, without the path or the package: the
// caller names what the path is for.
func CheckSocketPath(p string) error {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("a path has no NUL byte")
	case len(p) > MaxSocketPath:
		return fmt.Errorf("a unix socket's path holds at most %d bytes", MaxSocketPath)
	}
	return nil
}

// AnswerWriteTimeout is how long the agent takes at most to write an
// answer, from reading the request: a report about tens of thousands of
// QPs, every finding listed, takes seconds.
const AnswerWriteTimeout = time.Minute

// CheckReport is what `rdmatool qp-leaks` prints, and what /v1/qp-leaks
// answers.
type CheckReport struct {
	leakwatch.Report
	// Probes is "on" or "off"; ProbesError says why they are off.
	Probes      string `json:"probes"`
	ProbesError string `json:"probes_error"`
	// SitesError says, while the probes are on, why user QPs have no
	// creation site: "no uprobes (...)" when the uprobes were refused, or
	// the libraries without them; absent when every library found has
	// them (and when the probes are off: ProbesError says why).
	SitesError string `json:"sites_error,omitempty"`
	LostEvents uint64 `json:"lost_events"`
	// Scans counts the netlink QP dumps the report rests on, one per
	// device scanned.
	Scans   int      `json:"scans"`
	Devices []string `json:"devices"`
	// ScanError says which netlink listings or scans failed at their last
	// attempt ("" when none did): findings rest only on what was read.
	ScanError string `json:"scan_error"`
	// Source is "local" when this command observed the host itself for
	// --watch, "agent" when the agent answered from its longer history.
	Source string `json:"source"`
	// ObservedSince is when the observation began: the start of --watch,
	// or when the agent's history began: its start, or that of the agent
	// whose history it restored (RFC 3339, UTC).
	ObservedSince time.Time `json:"observed_since"`
}

// Status is what GET /v1/status returns.
type Status struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	// Probes is "on" or "off"; ProbesError says why they are off.
	Probes      string `json:"probes"`
	ProbesError string `json:"probes_error"`
	// Scans counts the netlink QP dumps so far, one per device scanned.
	// ScanError says what failed at the last attempt, per device ("" when
	// every device's last scan and the last device listing succeeded).
	Scans     int    `json:"scans"`
	ScanError string `json:"scan_error"`
	// LastScanSeconds is how long ago the last successful scan ended (-1
	// before the first).
	LastScanSeconds float64  `json:"last_scan_seconds"`
	Devices         []string `json:"devices"`
	// QPs is the number of live QPs the agent tracks.
	QPs        int    `json:"qps"`
	LostEvents uint64 `json:"lost_events"`
}
