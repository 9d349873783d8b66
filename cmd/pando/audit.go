package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/config"
)

func newAuditCmd(g *cli.Globals) *cobra.Command {
	var (
		since, who, path, domain, action string
		asJSON                           bool
		states                           []string
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit logs of controllers and shares on this host",
		Long: `Print the records of the audit logs (audit.jsonl) of the controllers and shares
whose state directories are given with --state (repeatable; the state directory
of pando up holds both), oldest first, as a table, or as JSON lines with --json.
Without --state: those of pando up in ./.pando, and of pando share beside the
client configuration. Lines of a log that are not records are skipped with a
warning. See docs/security.md, "Audit".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := audit.Filter{Who: who, Path: path, Domain: domain, Action: action}
			if since != "" {
				t, err := audit.ParseSince(since, time.Now())
				if err != nil {
					return cli.Usagef("%v", err)
				}
				f.Since = t
			}
			if len(states) == 0 {
				states = []string{".pando", filepath.Join(filepath.Dir(config.DefaultPath()), "shares")}
			}
			var dirs []string
			for _, s := range states {
				dirs = append(dirs, audit.StateDirs(s)...)
			}
			errOut := cmd.ErrOrStderr()
			recs, found, err := audit.Read(dirs, f, func(w audit.Warning) { fmt.Fprintf(errOut, "pando audit: %v\n", w) })
			if err != nil {
				return err
			}
			if found == 0 {
				return fmt.Errorf("no audit log (%s) in %s: give the state directory of a controller, a share or pando up with --state DIR", audit.FileName, strings.Join(states, " or "))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				for _, r := range recs {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			rows := [][]string{{"TIME", "RESULT", "WHO", "ACTION", "PATH", "RIGHTS", "DOMAIN", "BY", "FROM", "DETAIL"}}
			for _, r := range recs {
				rows = append(rows, []string{r.Time.Local().Format("2006-01-02 15:04:05.000"), r.Result, dash(r.Who), r.Action,
					dash(r.Path), dash(r.Rights), dash(r.Domain), dash(r.Server), dash(r.From), dash(r.Detail)})
			}
			return cli.Table(out, rows)
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only records since this long ago (90m, 24h) or this time (RFC 3339)")
	cmd.Flags().StringVar(&who, "who", "", "only records of this principal (alice@uva; alice: of any domain)")
	cmd.Flags().StringVar(&path, "path", "", "only records of this path and below (/uva/data at a controller, d/f at a share)")
	cmd.Flags().StringVar(&domain, "domain", "", "only records decided by this domain")
	cmd.Flags().StringVar(&action, "action", "", "only records of this action (resolve, acl-set, open, token, connect, ...)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the records as JSON lines, as the logs hold them")
	cmd.Flags().StringArrayVar(&states, "state", nil, "a state directory of a controller, a share or pando up (repeatable)")
	return cmd
}

// dash shows an empty field of a table as "-", and keeps a field on its
// line.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(s)
}
