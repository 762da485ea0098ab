package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// repository is the image's name, which the DaemonSet and
// kustomization.yaml's images: entry use.
const repository = "rdmatool"

// source is the org.opencontainers.image.source label.
const source = "https://github.com/rdmatool/rdmatool"

// options are the image's inputs.
type options struct {
	Binary, Copyright, License  string // files put in the image
	Version, Revision, Licenses string // labels
	Created                     time.Time
	Arch                        string
}

func main() {
	var o options
	var created, kubernetes, out string
	flag.StringVar(&o.Binary, "binary", "", "the static rdmatool binary")
	flag.StringVar(&o.Copyright, "copyright", "", "its copyright file (packaging/cmd/copyright)")
	flag.StringVar(&o.License, "license", "LICENSE", "rdmatool's license")
	flag.StringVar(&o.Version, "version", "", "the version (git describe), the image's tag")
	flag.StringVar(&o.Revision, "revision", "", "the commit")
	flag.StringVar(&o.Licenses, "licenses", "", "the SPDX expression of what the binary holds (copyright -spdx)")
	flag.StringVar(&created, "created", os.Getenv("SOURCE_DATE_EPOCH"), "the image's time, in seconds since 1970 (the commit's)")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "the binary's architecture")
	flag.StringVar(&kubernetes, "kubernetes", "packaging/kubernetes", "the kustomization the written one applies")
	flag.StringVar(&out, "out", "", "the directory to write to")
	flag.Parse()
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil || o.Binary == "" || o.Copyright == "" || o.Version == "" || out == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	o.Created = time.Unix(secs, 0).UTC()
	if err := run(o, kubernetes, out); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// run builds the image and writes it, and the kustomization, to out.
func run(o options, kubernetes, out string) error {
	tag, err := name.NewTag(repository+":"+o.Version, name.WithDefaultRegistry(""))
	if err != nil {
		return fmt.Errorf("tag: %w", err)
	}
	img, err := build(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	archive := filepath.Join(out, repository+"_"+o.Version+".tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", archive, err)
	}
	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	// The index names the manifest by its version; AppendImage would also
	// give it an artifactType, which an image's descriptor has not.
	if err := p.WriteImage(img); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	desc, err := descriptor(img)
	if err != nil {
		return err
	}
	desc.Annotations = map[string]string{"org.opencontainers.image.ref.name": o.Version}
	if err := p.AppendDescriptor(desc); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	return writeKustomization(out, kubernetes, o.Version)
}

// descriptor describes img's manifest.
func descriptor(img v1.Image) (v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: digest}, nil
}

// build makes the image: one layer on nothing, OCI media types.
func build(o options) (v1.Image, error) {
	files := []struct {
		path string
		from string
		mode int64
	}{
		{"usr/sbin/rdmatool", o.Binary, 0o755},
		{"usr/share/doc/rdmatool/copyright", o.Copyright, 0o644},
		{"usr/share/doc/rdmatool/LICENSE", o.License, 0o644},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(path string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: 0o755, ModTime: o.Created, Format: tar.FormatUSTAR})
	}
	for _, d := range []string{"usr", "usr/sbin", "usr/share", "usr/share/doc", "usr/share/doc/rdmatool"} {
		if err := dir(d); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(b)),
			ModTime: o.Created, Format: tar.FormatUSTAR}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: o.Created}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "packaging/cmd/image", Comment: "rdmatool " + o.Version},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Config.Entrypoint = []string{"/usr/sbin/rdmatool"}
	cf.Config.Cmd = []string{"agent"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "rdmatool",
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.licenses": o.Licenses,
		"org.opencontainers.image.created":  o.Created.Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cf)
}

// writeKustomization writes out/kustomization.yaml: the manifests of the
// kustomization in dir kubernetes, with the image rdmatool:version.
func writeKustomization(out, kubernetes, version string) error {
	absOut, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	absK, err := filepath.Abs(kubernetes)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(absK, "kustomization.yaml")); err != nil {
		return errors.New("no kustomization.yaml in " + kubernetes)
	}
	rel, err := filepath.Rel(absOut, absK)
	if err != nil {
		return err
	}
	k := fmt.Sprintf(`# Written by make image (packaging/cmd/image): the manifests of
# packaging/kubernetes with the image it built, %[1]s:%[2]s.
# kubectl apply -k on this directory, once each node's container runtime
# has the image (or it is pushed and newName says where).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %[3]s
images:
  - name: %[1]s
    newName: %[1]s
    newTag: %[2]q
`, repository, version, filepath.ToSlash(rel))
	return os.WriteFile(filepath.Join(out, "kustomization.yaml"), []byte(k), 0o644)
}
