package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/owner"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// jsonObject decodes one JSON object with numbers kept whole, so a field's
// name, presence and exact value can be compared.
func jsonObject(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return m
}

func TestRowJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		row  any
		want string // every documented field, with its value
	}{
		{
			name: "kernel-owned QP",
			row:  qpRowOf(rdmanl.QP{DevName: "rxe0", Port: 1, LQPN: 1, Type: rdmanl.QPTypeGSI, State: rdmanl.QPStateRTS, SQPSN: 0x5a, Owner: rdmanl.Owner{KernName: "ib_core"}}, nil, rdmanl.ULPIndex{}),
			want: `{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":1,"rqpn":0,"type":"GSI","state":"RTS","rq_psn":0,"sq_psn":90,
				"path_mig_state":"","pdn":0,"srq":false,"srqn":0,"pid":0,"comm":"ib_core","kern_name":"ib_core","ulp":"","subtype":""}`,
		},
		{
			name: "user QP on SRQ 0",
			row: qpRowOf(rdmanl.QP{
				DevIndex: 1, DevName: "siw0", Port: 1, LQPN: 17, RQPN: 18, HasRQPN: true, RQPSN: 1, SQPSN: 2,
				HasPathMig: true, PathMigState: 2, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, PDN: 3,
				OnSRQ: true, SRQN: 0, Owner: rdmanl.Owner{PID: 1234},
			}, nil, rdmanl.ULPIndex{}),
			want: `{"ifindex":1,"ifname":"siw0","port":1,"lqpn":17,"rqpn":18,"type":"RC","state":"ERR","rq_psn":1,"sq_psn":2,
				"path_mig_state":"ARMED","pdn":3,"srq":true,"srqn":0,"pid":1234,"comm":"","kern_name":"","ulp":"","subtype":""}`,
		},
		{
			name: "QP without SRQ, owner gone",
			row:  qpRowOf(rdmanl.QP{DevName: "rxe0", LQPN: 0xffffff, Type: rdmanl.QPTypeDriver, State: 9, Subtype: "DCT"}, nil, rdmanl.ULPIndex{}),
			want: `{"ifindex":0,"ifname":"rxe0","port":0,"lqpn":16777215,"rqpn":0,"type":"DRIVER","state":"unknown(9)","rq_psn":0,"sq_psn":0,
				"path_mig_state":"","pdn":0,"srq":false,"srqn":0,"pid":0,"comm":"","kern_name":"","ulp":"","subtype":"DCT"}`,
		},
		{
			name: "SRQ with QP ranges",
			row: srqRowOf(rdmanl.SRQ{
				DevIndex: 0, DevName: "rxe0", SRQN: 0, Type: 0, PDN: 3,
				QPs: []rdmanl.QPRange{{Min: 17, Max: 18}, {Min: 20, Max: 20}}, Owner: rdmanl.Owner{PID: 1234},
			}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","srqn":0,"type":"BASIC","pdn":3,"cqn":0,"lqpn":["17-18","20"],
				"qp_ranges":[{"min":17,"max":18},{"min":20,"max":20}],"qps":3,"pid":1234,"comm":"","kern_name":""}`,
		},
		{
			name: "SRQ without QPs",
			row:  srqRowOf(rdmanl.SRQ{DevName: "rxe0", SRQN: 2, Type: 1, PDN: 3, CQN: 4, HasCQ: true, Owner: rdmanl.Owner{KernName: "ib_isert"}}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","srqn":2,"type":"XRC","pdn":3,"cqn":4,"lqpn":[],"qp_ranges":[],"qps":0,
				"pid":0,"comm":"ib_isert","kern_name":"ib_isert"}`,
		},
		{
			name: "connected cm_id",
			row: cmIDRowOf(rdmanl.CMID{
				DevName: "rxe0", Port: 1, CMIDN: 2, LQPN: 17, HasQP: true, PS: 0x0106, Type: rdmanl.QPTypeRC, State: 5,
				SrcAddr: netip.MustParseAddrPort("192.0.2.1:7471"), DstAddr: netip.MustParseAddrPort("192.0.2.1:39000"),
				Owner: rdmanl.Owner{PID: 1234},
			}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","port":1,"cm_idn":2,"lqpn":17,"qp_type":"RC","state":"CONNECT","ps":"TCP",
				"src_addr":"192.0.2.1","src_port":7471,"dst_addr":"192.0.2.1","dst_port":39000,"pid":1234,"comm":"","kern_name":""}`,
		},
		{
			name: "listening IPv6 cm_id without a port",
			row: cmIDRowOf(rdmanl.CMID{
				DevName: "siw0", DevIndex: 1, CMIDN: 0, PS: 0x0106, Type: rdmanl.QPTypeRC, State: 8,
				SrcAddr: netip.MustParseAddrPort("[2001:db8::1]:7471"), Owner: rdmanl.Owner{KernName: "rdma_cm"},
			}, nil),
			want: `{"ifindex":1,"ifname":"siw0","port":0,"cm_idn":0,"lqpn":0,"qp_type":"RC","state":"LISTEN","ps":"TCP",
				"src_addr":"2001:db8::1","src_port":7471,"dst_addr":"","dst_port":0,"pid":0,"comm":"rdma_cm","kern_name":"rdma_cm"}`,
		},
		{
			name: "MR with keys and a 64-bit IOVA",
			row: mrRowOf(rdmanl.MR{
				DevName: "rxe0", MRN: 4, RKey: 0x1a2b, LKey: 0x1a2c, HasKeys: true,
				IOVA: 0xffffffffffff1234, Len: 1<<40 + 1, PDN: 2, Owner: rdmanl.Owner{PID: 1234},
			}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","mrn":4,"rkey":6699,"rkey_hex":"0x1a2b","lkey":6700,"lkey_hex":"0x1a2c",
				"iova":18446744073709490740,"iova_hex":"0xffffffffffff1234","mrlen":1099511627777,"pdn":2,"pid":1234,"comm":"","kern_name":"","ulp":""}`,
		},
		{
			name: "MR without CAP_NET_ADMIN",
			row:  mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 4, IOVA: 0x7f0000001000, Len: 4096, PDN: 2, Owner: rdmanl.Owner{PID: 1234}}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","mrn":4,"rkey":0,"rkey_hex":"","lkey":0,"lkey_hex":"",
				"iova":139637976731648,"iova_hex":"0x7f0000001000","mrlen":4096,"pdn":2,"pid":1234,"comm":"","kern_name":"","ulp":""}`,
		},
		{
			name: "MR of RDS's FRWR pool",
			row:  mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 9, RKey: 0x2f3, LKey: 0x2f3, HasKeys: true, Len: 0, Owner: rdmanl.Owner{KernName: "rds_rdma"}}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","mrn":9,"rkey":755,"rkey_hex":"0x2f3","lkey":755,"lkey_hex":"0x2f3",
				"iova":0,"iova_hex":"0x0","mrlen":0,"pdn":0,"pid":0,"comm":"rds_rdma","kern_name":"rds_rdma","ulp":"rds_rdma"}`,
		},
		{
			name: "MR of ib_core",
			row:  mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 1, Len: 4096, Owner: rdmanl.Owner{KernName: "ib_core"}}, nil),
			want: `{"ifindex":0,"ifname":"rxe0","mrn":1,"rkey":0,"rkey_hex":"","lkey":0,"lkey_hex":"",
				"iova":0,"iova_hex":"0x0","mrlen":4096,"pdn":0,"pid":0,"comm":"ib_core","kern_name":"ib_core","ulp":""}`,
		},
		{
			name: "device with name assignment",
			row: devRowOf(rdmanl.Device{
				Index: 0, Name: "rxe0", Ports: 1, CapFlags: 0x8000000000000001, FWVersion: "",
				NodeGUID: 0x020000fffe000101, SysImageGUID: 0x020000fffe000101, NodeType: 1, Protocol: "roce",
				HasNameAssign: true, NameAssignType: rdmanl.NameAssignUser,
			}),
			want: `{"ifindex":0,"ifname":"rxe0","node_type":"ca","fw":"","node_guid":"0200:00ff:fe00:0101",
				"sys_image_guid":"0200:00ff:fe00:0101","protocol":"roce","ports":1,"caps":9223372036854775809,"name_assign_type":"user"}`,
		},
		{
			name: "device before 6.11",
			row: devRowOf(rdmanl.Device{
				Index: 1, Name: "siw0", Ports: 1, FWVersion: "0.1", NodeGUID: 0x0002c90300a1b2c3, SysImageGUID: 0x0002c90300a1b2c3,
				NodeType: 4, Protocol: "iw", NameAssignType: rdmanl.NameAssignUser,
			}),
			want: `{"ifindex":1,"ifname":"siw0","node_type":"rnic","fw":"0.1","node_guid":"0002:c903:00a1:b2c3",
				"sys_image_guid":"0002:c903:00a1:b2c3","protocol":"iw","ports":1,"caps":0,"name_assign_type":""}`,
		},
		{
			name: "port",
			row: linkRowOf(rdmanl.Port{
				DevIndex: 0, DevName: "rxe0", Index: 1, State: rdmanl.PortStateActive, PhysState: 5,
				NetdevIndex: 3, NetdevName: "dummy0", CapFlags: 0x10000,
			}),
			want: `{"ifindex":0,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"dummy0","netdev_index":3,
				"lid":0,"sm_lid":0,"lmc":0,"subnet_prefix":"","caps":65536}`,
		},
		{
			name: "summary",
			row: summaryRowOf(rdmanl.Summary{DevIndex: 1, DevName: "siw0", Counts: []rdmanl.ResourceCount{
				{Name: "pd", Current: 1}, {Name: "cq", Current: 2}, {Name: "qp", Current: 3}, {Name: "cm_id", Current: 4},
				{Name: "mr", Current: 5}, {Name: "ctx", Current: 6}, {Name: "srq", Current: 7},
			}}),
			want: `{"ifindex":1,"ifname":"siw0","pd":1,"cq":2,"qp":3,"cm_id":4,"mr":5,"ctx":6,"srq":7}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := json.Marshal(tt.row)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(jsonObject(t, []byte(tt.want)), jsonObject(t, raw)); diff != "" {
				t.Errorf("JSON (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMRRowIOVARoundTrip(t *testing.T) {
	t.Parallel()
	const iova = 0xffffffffffff1234 // not representable as a float64
	row := mrRowOf(rdmanl.MR{DevName: "rxe0", MRN: 1, IOVA: iova, Len: 1<<64 - 1}, nil)
	raw, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"iova":18446744073709490740,`) {
		t.Errorf("iova is not a whole integer in %s", raw)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var got mrRow
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.IOVA != iova || got.MRLen != 1<<64-1 {
		t.Errorf("decoded iova %#x, mrlen %d, want %#x, %d", got.IOVA, got.MRLen, uint64(iova), uint64(1<<64-1))
	}
}

func TestRowOwnerFromProc(t *testing.T) {
	t.Parallel()
	procs, err := owner.NewResolver("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skipf("no /proc/self/comm: %v", err)
	}
	pid := uint32(os.Getpid())
	row := qpRowOf(rdmanl.QP{DevName: "rxe0", LQPN: 17, Owner: rdmanl.Owner{PID: pid}}, procs, rdmanl.ULPIndex{})
	if row.PID != pid || row.Comm != strings.TrimSpace(string(comm)) || row.KernName != "" {
		t.Errorf("owner = pid %d comm %q kern_name %q, want pid %d comm %q kern_name \"\"",
			row.PID, row.Comm, row.KernName, pid, strings.TrimSpace(string(comm)))
	}
	kern := qpRowOf(rdmanl.QP{DevName: "rxe0", LQPN: 1, Owner: rdmanl.Owner{KernName: "ib_core"}}, procs, rdmanl.ULPIndex{})
	if kern.PID != 0 || kern.Comm != "ib_core" || kern.KernName != "ib_core" {
		t.Errorf("kernel owner = pid %d comm %q kern_name %q, want 0, ib_core, ib_core", kern.PID, kern.Comm, kern.KernName)
	}
}

// A QP row writes its JSON itself, byte for byte as encoding/json writes
// it, whatever its strings hold; the JSON listing builds rows without the
// text output's words, and its rows are the text listing's otherwise.
func TestQPRowJSON(t *testing.T) {
	qps := []rdmanl.QP{
		{DevName: "rxe0", Port: 1, LQPN: 1, Type: rdmanl.QPTypeGSI, State: rdmanl.QPStateRTS, SQPSN: 0x5a, Owner: rdmanl.Owner{KernName: "ib_core"}},
		{DevIndex: 7, DevName: "mlx5_0", Port: 2, LQPN: 0xffffff, RQPN: 18, HasRQPN: true, RQPSN: 1 << 23, SQPSN: 99,
			PathMigState: 1, HasPathMig: true, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateErr, PDN: 4,
			OnSRQ: true, SRQN: 0, Owner: rdmanl.Owner{PID: 1 << 31}},
		{DevName: `a"b\c<d>&é` + "\x01\xff", LQPN: 17, Type: rdmanl.QPTypeDriver, State: 9, Subtype: "DCT\u2028"},
		{DevName: "siw0", Port: 1, LQPN: 2, Type: rdmanl.QPTypeRC, State: rdmanl.QPStateRTS, Owner: rdmanl.Owner{KernName: "rdma_cm"}},
	}
	ulps := rdmanl.NewULPIndex([]rdmanl.CMID{{LQPN: 2, Owner: rdmanl.Owner{KernName: "nvmet_rdma"}}}, nil)
	for _, q := range qps {
		full, data := qpRowOf(q, nil, ulps), qpRowData(q, nil, ulps)
		want, err := json.Marshal(full)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.appendJSON(nil); string(got) != string(want) {
			t.Errorf("QP %d: appendJSON\n%s\nwant (encoding/json)\n%s", q.LQPN, got, want)
		}
		data.Link, data.SRQText, data.CommText = full.Link, full.SRQText, full.CommText
		if data != full {
			t.Errorf("QP %d: JSON row %+v, text row %+v", q.LQPN, data, full)
		}
	}
	if r := qpRowOf(qps[3], nil, ulps); r.ULP != "nvmet_rdma" {
		t.Errorf("the rdma_cm QP's ULP is %q, want nvmet_rdma (the test's premise)", r.ULP)
	}
}

// An MR row writes its JSON itself, byte for byte as encoding/json writes
// it; a kernel MR's ulp is its module, in the text as well (as a QP row's).
func TestMRRowJSON(t *testing.T) {
	mrs := []rdmanl.MR{
		{DevName: "rxe0", MRN: 4, RKey: 0x1a2b, LKey: 0x1a2c, HasKeys: true, IOVA: 1<<64 - 1, Len: 1<<40 + 1, PDN: 2, Owner: rdmanl.Owner{PID: 1 << 31}},
		{DevIndex: 3, DevName: `a"b\c<d>&é` + "\x01\xff", MRN: 7, Owner: rdmanl.Owner{KernName: "nvme_rdma"}},
		{DevName: "siw0", MRN: 1, Owner: rdmanl.Owner{KernName: "ib_core"}},
	}
	for _, m := range mrs {
		r := mrRowOf(m, nil)
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.appendJSON(nil); string(got) != string(want) {
			t.Errorf("MR %d: appendJSON\n%s\nwant (encoding/json)\n%s", m.MRN, got, want)
		}
	}
	if line := textLine(mrRowOf(mrs[1], nil), false); !strings.HasSuffix(line, "comm [nvme_rdma] ulp nvme_rdma") {
		t.Errorf("nvme_rdma's MR reads %q, want it to end with comm [nvme_rdma] ulp nvme_rdma", line)
	}
	if line := textLine(mrRowOf(mrs[2], nil), false); strings.Contains(line, "ulp") {
		t.Errorf("ib_core's MR reads %q, want no ulp", line)
	}
}
