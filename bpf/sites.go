package bpf

import (
	"strconv"
	"strings"
)

// Sites reports how the creation sites of user QPs are captured
// (Options.Sites): the verbs library files with uprobes, and why some or
// all have none.
type Sites struct {
	// Libraries are the library files with uprobes, as the process they
	// were found in names them (or, for the host's own, their path).
	Libraries []string
	// Err is the first failure: the uprobe programs refused (no uprobe
	// support, lockdown), or a library that could not be read or probed.
	// User QPs created through a library without uprobes have no site.
	Err error
}

// libFunc is a QP-creating function of a verbs library that a uprobe
// traces. The id is the uprobe's cookie, which the programs write into a
// create's record (enum lib_fn in qp.c).
type libFunc struct {
	id   uint8
	lib  string // the library's file name up to ".so": "libibverbs"
	name string
}

// libFuncs are the library functions whose uprobes record where an
// application creates a QP. ibv_create_qp_ex and ibv_create_srq_ex are
// static inline functions of verbs.h with no symbol: ibv_create_qp_ex
// calls ibv_create_qp when it asks for nothing beyond it, and the provider
// directly otherwise. ibv_create_srq is not traced: no probe records SRQ
// creates.
var libFuncs = []libFunc{
	{id: 1, lib: "libibverbs", name: "ibv_create_qp"}, // both symbol versions, IBVERBS_1.0 and 1.1
	{id: 2, lib: "librdmacm", name: "rdma_create_qp"},
	{id: 3, lib: "librdmacm", name: "rdma_create_qp_ex"},
	{id: 4, lib: "librdmacm", name: "rdma_create_ep"},
}

// libFuncName names the library function of a record's id.
func libFuncName(id uint8) string {
	for i := range libFuncs {
		if libFuncs[i].id == id {
			return libFuncs[i].name
		}
	}
	return "unknown(" + strconv.Itoa(int(id)) + ")"
}

// verbsLibrary returns the library (libFunc.lib) that a file named base
// is a version of ("libibverbs.so.1.14.44.0" is libibverbs), or "".
func verbsLibrary(base string) string {
	for _, lib := range []string{"libibverbs", "librdmacm"} {
		if rest, ok := strings.CutPrefix(base, lib); ok && (rest == ".so" || strings.HasPrefix(rest, ".so.")) {
			return lib
		}
	}
	return ""
}
