package main

import (
	"context"
	"log/slog"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/watch"
)

// openProbes attaches the eBPF probes for qp-leaks and the agent, with
// the uprobes that record user QPs' creation sites (bpf.Options.Sites);
// without privileges or BTF the error says what is missing and the check
// runs on netlink only.
func openProbes(_ context.Context, log *slog.Logger) (watch.EventSource, error) {
	t, err := bpf.Open(log, bpf.Options{Sites: true})
	if err != nil {
		return nil, err
	}
	return t, nil
}
