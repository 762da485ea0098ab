package leakwatch

// Owner is who owns a QP: the thread that created it and its process as
// netlink, /proc and the probes name them, or the kernel module that
// created it. Finding, Group, OwnerQPs and ZombieContext embed it, so a
// report's JSON names the owner in the keys of the object that has one.
type Owner struct {
	// PID is the thread that created the QP, as netlink records it; 0
	// for a kernel QP, or when the creator is gone or in another pid
	// namespace.
	PID uint32 `json:"pid"`
	// TGID is the process (thread group) PID belongs to (PID itself for a
	// process's main thread); 0 when /proc or a probe did not say.
	TGID uint32 `json:"tgid"`
	// Comm is the process's command name; "" when unknown.
	Comm string `json:"comm"`
	// Cgroup is the owner's cgroup v2 path, such as
	// /system.slice/foo.service ("" when unknown); ContainerID the 64-hex
	// container id that path names (docker, containerd, cri-o, podman;
	// "" when it names none).
	Cgroup      string `json:"cgroup"`
	ContainerID string `json:"container_id"`
	// KernName is the kernel module that created a kernel QP ("" for a
	// user QP).
	KernName string `json:"kern_name"`
	// ULP is the kernel module a kernel QP serves when KernName is the
	// rdma_cm that created it for that module ("nvmet_rdma": its rdma_cm
	// ID's owner, or the module above rdma_cm in its creation stack); ""
	// when not known or not a kernel QP.
	ULP string `json:"ulp"`
}

// Kernel reports whether the owner is a kernel module.
func (o Owner) Kernel() bool { return o.KernName != "" }

// process is the id of the owner's process: TGID, else the thread PID
// (when neither /proc nor a probe said which process it belongs to).
func (o Owner) process() uint32 {
	if o.TGID != 0 {
		return o.TGID
	}
	return o.PID
}

// asProcess is the owner as a summary group names it: PID is the process
// (so the QPs of a process's threads fall in one group) and TGID is 0.
func (o Owner) asProcess() Owner {
	o.PID, o.TGID = o.process(), 0
	return o
}

// tallied is the owner as Tally counts it (OwnerQPs): the process (PID)
// and its command, or the kernel module (in Comm) and the ULP.
func (o Owner) tallied() Owner {
	if o.Kernel() {
		return Owner{Comm: o.KernName, ULP: o.ULP}
	}
	return Owner{PID: o.process(), Comm: o.Comm}
}

// resolve takes what /proc said of the owner's process: its TGID, Comm,
// Cgroup and ContainerID (p's other fields are not read).
func (o *Owner) resolve(p Owner) {
	o.TGID, o.Comm, o.Cgroup, o.ContainerID = p.TGID, p.Comm, p.Cgroup, p.ContainerID
}

// name names the owner in a hint: the ULP, else the kernel module, else
// the command.
func (o Owner) name() string {
	switch {
	case o.ULP != "":
		return o.ULP
	case o.KernName != "":
		return o.KernName
	case o.Comm != "":
		return o.Comm
	}
	return "its owner"
}
