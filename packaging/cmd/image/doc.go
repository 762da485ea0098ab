// Command image builds rdmatool's OCI image without a container daemon
// and without pulling anything (go-containerregistry): from scratch, one
// layer holding the static binary as /usr/sbin/rdmatool and its copyright
// file and LICENSE in /usr/share/doc/rdmatool, run as root (the DaemonSet
// gives it its capabilities), entrypoint rdmatool, command agent. The
// config carries the OCI labels org.opencontainers.image.title, .version,
// .revision, .source, .licenses and .created.
//
//	go run ./packaging/cmd/image -binary BIN -copyright FILE -license LICENSE \
//		-version VERSION -revision COMMIT -licenses SPDX -created EPOCH \
//		-kubernetes packaging/kubernetes -out DIR
//
// It writes in DIR the image as rdmatool_VERSION.tar (a docker-archive
// tagged rdmatool:VERSION: podman load, docker load, ctr images import)
// and as the OCI layout DIR/oci (its index names it VERSION: skopeo copy
// oci:DIR/oci:VERSION), and DIR/kustomization.yaml, which applies the
// manifests of packaging/kubernetes with that image (kubectl apply -k
// DIR). Two runs on the same inputs write the same bytes: every time in
// the image is -created (make image passes the commit's time), files are
// root's with fixed modes, and the layer's tar and gzip streams hold
// nothing else that varies.
package main
