package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func sampleDevDetails() devDetailsReport {
	return devDetailsReport{
		Devices: []devDetail{{
			devRow:  devRow{IfIndex: 3, IfName: "mlx5_0", Lead: "3: mlx5_0:", NodeType: "ca", FW: "20.31.1014", NodeGUID: "248a:0703:0049:d4f0", SysImageGUID: "248a:0703:0049:d4f0", Protocol: "ib", Ports: 1},
			BoardID: "MT_0000000010", HCAType: "MT4123",
			PCI:    &pciRow{Addr: "0000:3b:00.0", Driver: "mlx5_core", VendorID: "0x15b3", DeviceID: "0x101b", ResetMethods: []string{"flr", "bus"}, Resettable: true},
			Uverbs: "uverbs2", UverbsDev: "231:194",
			PortInfo: []devPortRow{{Port: 1, State: "ACTIVE", PhysState: "LINK_UP", RateGbps: 100, LinkLayer: "InfiniBand", Netdev: "ib0",
				Counters: map[string]uint64{"symbol_error": 0, "port_xmit_data": 1000}, HWCounters: map[string]uint64{}}},
			Holders: []holderRow{{PID: 1234, Comm: "app", Cgroup: "/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
				ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", QPs: 4, Contexts: 1,
				Files: []fileRow{{FD: 5, Path: "/dev/infiniband/uverbs2"}}}},
			SysfsSkipped: []skippedRow{{Path: "ports/1/hw_counters/np_cnp_sent", Error: `not a counter: "garbage"`}},
		}},
		ZombieContexts:    []zombieRow{{PID: 300, Comm: "stuck", Files: []fileRow{{FD: 3, Path: "/dev/infiniband/uverbs0"}}}},
		HoldersUnreadable: []uint32{1, 2},
	}
}

// The text of dev show -d: the device line, then indented what sysfs
// says, each port, each holder and what was skipped; counters only when
// asked.
func TestRenderDevDetails(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := renderDevDetails(&b, sampleDevDetails(), true); err != nil {
		t.Fatal(err)
	}
	want := `3: mlx5_0: node-type ca fw 20.31.1014 node-guid 248a:0703:0049:d4f0 sys-image-guid 248a:0703:0049:d4f0 protocol ib ports 1 caps 0
    board-id MT_0000000010 hca-type MT4123 uverbs uverbs2 (231:194) pci 0000:3b:00.0 driver mlx5_core id 15b3:101b reset-methods flr,bus
    port 1 state ACTIVE physical-state LINK_UP rate 100 Gb/s link-layer InfiniBand netdev ib0
        counters port_xmit_data 1000 symbol_error 0
    holder pid 1234 comm app qps 4 cm-ids 0 contexts 1 cgroup /system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope container 0123456789ab fd 5 /dev/infiniband/uverbs2
    sysfs skipped ports/1/hw_counters/np_cnp_sent: not a counter: "garbage"
zombie contexts (uverbs files of unregistered devices, no context on any device):
    pid 300 comm stuck fd 3 /dev/infiniband/uverbs0 (deleted)
holders may be missing: the open files of 2 processes could not be read (run as root)
`
	if b.String() != want {
		t.Errorf("renderDevDetails:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	renderDevDetails(&b, sampleDevDetails(), false)
	if strings.Contains(b.String(), "\n        counters") {
		t.Errorf("counters printed without --counters:\n%s", b.String())
	}
}

// The JSON keys of dev show -d -j are API.
func TestDevDetailsJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(sampleDevDetails())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"devices":[{"ifindex":3,"ifname":"mlx5_0","node_type":"ca","fw":"20.31.1014","node_guid":"248a:0703:0049:d4f0","sys_image_guid":"248a:0703:0049:d4f0","protocol":"ib","ports":1,"caps":0,"name_assign_type":"",` +
		`"board_id":"MT_0000000010","hca_type":"MT4123","pci":{"addr":"0000:3b:00.0","driver":"mlx5_core","vendor_id":"0x15b3","device_id":"0x101b","is_vf":false,"is_sf":false,"reset_methods":["flr","bus"],"resettable":true},` +
		`"uverbs":"uverbs2","uverbs_dev":"231:194","port_info":[{"port":1,"state":"ACTIVE","physical_state":"LINK_UP","rate_gbps":100,"link_layer":"InfiniBand","netdev":"ib0","counters":{"port_xmit_data":1000,"symbol_error":0},"hw_counters":{}}],` +
		`"holders":[{"pid":1234,"comm":"app","cgroup":"/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope","container_id":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","qps":4,"cm_ids":0,"contexts":1,"files":[{"fd":5,"path":"/dev/infiniband/uverbs2"}]}],` +
		`"sysfs_skipped":[{"path":"ports/1/hw_counters/np_cnp_sent","error":"not a counter: \"garbage\""}]}],` +
		`"zombie_contexts":[{"pid":300,"comm":"stuck","cgroup":"","container_id":"","files":[{"fd":3,"path":"/dev/infiniband/uverbs0"}]}],"holders_unreadable":[1,2]}`
	if string(b) != want {
		t.Errorf("JSON:\n%s\nwant:\n%s", b, want)
	}
}
