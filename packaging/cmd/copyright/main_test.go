package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/licensecheck"
)

const mitText = `MIT License

Copyright (c) 2020 Example Person

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
`

const bsdText = `Copyright 2009 The Example Authors.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are
met:

   * Redistributions of source code must retain the above copyright
notice, this list of conditions and the following disclaimer.
   * Redistributions in binary form must reproduce the above
copyright notice, this list of conditions and the following disclaimer
in the documentation and/or other materials provided with the
distribution.
   * Neither the name of Example Inc. nor the names of its
contributors may be used to endorse or promote products derived from
this software without specific prior written permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS
"AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT
LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR
A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT
OWNER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT
LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE,
DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
(INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
`

// apacheText is the repository's own LICENSE.
func apacheText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeFiles writes name -> content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// paragraphs splits a copyright file into its paragraphs' fields, each
// field's continuation lines joined to it.
func paragraphs(text string) []map[string]string {
	var ps []map[string]string
	for _, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		m := map[string]string{}
		key := ""
		for _, line := range strings.Split(p, "\n") {
			if strings.HasPrefix(line, " ") {
				m[key] += "\n" + line
				continue
			}
			k, v, _ := strings.Cut(line, ": ")
			key = k
			m[k] = v
		}
		ps = append(ps, m)
	}
	return ps
}

// The file has rdmatool's paragraphs, one per module with the license of
// its license files (text copied unless Debian ships it) and their
// copyright lines, and a stand-alone paragraph for every license a Files
// paragraph names without its text.
func TestWrite(t *testing.T) {
	modcache, goroot := t.TempDir(), t.TempDir()
	writeFiles(t, goroot, map[string]string{"LICENSE": bsdText, "README.md": "Copyright 2000 not a license file\n"})
	writeFiles(t, modcache, map[string]string{
		"github.com/!example/mit@v1.0.0/LICENSE":  mitText,
		"example.org/apache@v0.1.0/LICENSE":       apacheText(t),
		"example.org/apache@v0.1.0/NOTICE":        "Copyright 2019-2021 The Apache Example Authors\n",
		"example.org/fork@v2.0.0/LICENSE.txt":     bsdText,
		"example.org/replaced@v1.0.0/LICENSE.txt": "not a license\n",
	})
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Deps: []*debug.Module{
		{Path: "github.com/Example/mit", Version: "v1.0.0"},
		{Path: "example.org/apache", Version: "v0.1.0"},
		{Path: "example.org/replaced", Version: "v1.0.0", Replace: &debug.Module{Path: "example.org/fork", Version: "v2.0.0"}},
	}}
	var b bytes.Buffer
	if err := write(&b, bi, modcache, goroot); err != nil {
		t.Fatal(err)
	}
	type para struct{ Files, Copyright, License string }
	var got []para
	texts := map[string]string{}
	standalone := map[string]bool{}
	for _, p := range paragraphs(b.String()) {
		if _, ok := p["Files"]; !ok {
			if name, ok := p["License"]; ok {
				standalone[strings.SplitN(name, "\n", 2)[0]] = true
			}
			continue
		}
		name, text, _ := strings.Cut(p["License"], "\n")
		got = append(got, para{p["Files"], p["Copyright"], name})
		texts[p["Files"]] = text
	}
	want := []para{
		{"*", "2026 the rdmatool developers", "Apache-2.0"},
		{"bpf/qp.c bpf/qp_*_bpfel.o", "2026 the rdmatool developers", "Expat or GPL-2"},
		{"go/src/*", "2009 The Example Authors.", "BSD-3-clause"},
		{"vendor/github.com/Example/mit/*", "2020 Example Person", "Expat"},
		{"vendor/example.org/apache/*", "2019-2021 The Apache Example Authors", "Apache-2.0"},
		{"vendor/example.org/fork/*", "2009 The Example Authors.", "BSD-3-clause"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Files paragraphs (-want +got):\n%s", diff)
	}
	for files, text := range texts {
		switch {
		case files == "vendor/github.com/Example/mit/*" && !strings.Contains(text, "\n Permission is hereby granted"):
			t.Errorf("%s: the MIT text is not copied:\n%s", files, text)
		case files == "vendor/example.org/apache/*" && text != "":
			t.Errorf("%s: Apache-2.0's text is copied, want the stand-alone paragraph's reference", files)
		case strings.Contains(text, "\n \n"):
			t.Errorf("%s: an empty line in the text is not written as \" .\"", files)
		}
	}
	for _, name := range []string{"Apache-2.0", "GPL-2", "Expat"} {
		if !standalone[name] {
			t.Errorf("no stand-alone License: %s paragraph", name)
		}
	}
	if !strings.Contains(b.String(), "/usr/share/common-licenses/Apache-2.0") {
		t.Error("Apache-2.0 is not referred to in /usr/share/common-licenses")
	}
	b.Reset()
	if err := writeSPDX(&b, bi, modcache, goroot); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "(MIT OR GPL-2.0-only) AND Apache-2.0 AND BSD-3-Clause AND MIT\n"; got != want {
		t.Errorf("SPDX expression %q, want %q", got, want)
	}
}

// A module without a recognized license file, or missing from the module
// cache, is an error.
func TestWriteUnknownLicense(t *testing.T) {
	modcache, goroot := t.TempDir(), t.TempDir()
	writeFiles(t, goroot, map[string]string{"LICENSE": bsdText})
	writeFiles(t, modcache, map[string]string{"example.org/unknown@v1.0.0/LICENSE": "All rights reserved.\n"})
	for _, m := range []*debug.Module{
		{Path: "example.org/unknown", Version: "v1.0.0"},
		{Path: "example.org/missing", Version: "v1.0.0"},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Deps: []*debug.Module{m}}
		if err := write(&bytes.Buffer{}, bi, modcache, goroot); err == nil || !strings.Contains(err.Error(), m.Path) {
			t.Errorf("%s: error %v, want one naming the module", m.Path, err)
		}
	}
}

// The repository's LICENSE is the Apache License 2.0 and nothing else, as
// the copyright file says of rdmatool's Go code.
func TestRepositoryLicense(t *testing.T) {
	cov := licensecheck.Scan([]byte(apacheText(t)))
	if len(cov.Match) != 1 || cov.Match[0].ID != "Apache-2.0" || cov.Percent < 99 {
		t.Errorf("LICENSE: %.1f%% matched as %+v, want Apache-2.0 whole", cov.Percent, cov.Match)
	}
}
