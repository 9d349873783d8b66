package wire

import "time"

// ShareHealth is a share's reachability as an agent's client measures it
// (its pings and calls), as `pando stats` and a gateway's page show it.
type ShareHealth struct {
	Share   string        `json:"share"`
	Up      bool          `json:"up"`
	Since   time.Time     `json:"since"` // when the share went down, or came (back) up
	LastErr string        `json:"last_error,omitempty"`
	Outages uint64        `json:"outages"`
	RTT     time.Duration `json:"rtt_ns"` // smoothed round trip of pings
}
