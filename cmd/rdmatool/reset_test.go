package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/reset"
)

// TestRenderReset: the text report says what dies, what state the device
// is in and how to go on; every line a user acts on is there.
func TestRenderReset(t *testing.T) {
	waiting := reset.Report{
		Device: "rxe0", Kind: "rxe", Netdevs: []string{"dummy0"}, Method: reset.MethodRelink, QPs: 2, MRs: 1, KernelQPs: 1,
		Holders:   []reset.Holder{{PID: 42, Comm: "qpwork", Files: []string{"/dev/infiniband/uverbs0"}, QPs: 2, MRs: 1}},
		Result:    reset.ResultWaiting,
		WaitingOn: []reset.Holder{{PID: 42, Comm: "qpwork"}},
		State:     "half-removed: rxe0 no longer accepts new users",
		Next:      "to finish, end the holders (kill 42)",
		Events:    []reset.Event{{Time: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), Kind: "unregister", Device: "rxe0", Source: "probes"}},
	}
	var b strings.Builder
	if err := renderReset(&b, &globals{}, waiting); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rxe0: rxe on dummy0, node_guid 0000:0000:0000:0000, method relink\n",
		"destroys: 2 QPs, 1 MRs of 1 processes (1 kernel QPs are re-created)\n",
		"  pid 42 (qpwork) qps 2 mrs 1 holds /dev/infiniband/uverbs0\n",
		"rxe cannot cut its users off",
		"still held by pid 42 (qpwork)\n",
		"event: 12:00:00.000 unregister rxe0 (probes)\n",
		"state: half-removed",
		"next: to finish, end the holders (kill 42)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := renderReset(&b, &globals{json: true}, waiting); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"result":"waiting"`, `"waiting_on":[{"pid":42,"comm":"qpwork"`, `"next":"to finish`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON report lacks %s:\n%s", want, b.String())
		}
	}
}
