package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// versionInfo is what `rdmatool version -j` prints.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the rdmatool version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if g.json {
				return g.renderJSON(cmd.OutOrStdout(), v)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "rdmatool %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
			return err
		},
	}
}
