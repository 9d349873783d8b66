package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pando.dev/pando/internal/client"
)

var (
	descCtrlUp = prometheus.NewDesc("pando_controller_up",
		"1 if the controller answered the agent's last request to it, 0 if it did not (the agent then works on the mount table and tokens it holds), absent before the first.", nil, nil)
	descCtrlState = prometheus.NewDesc("pando_controller_state_seconds",
		"How long the controller has been up or down (see pando_controller_up).", nil, nil)
	descCtrlErrors = prometheus.NewDesc("pando_controller_errors_total",
		"Requests to the controller that reached none.", nil, nil)
	descMountAge = prometheus.NewDesc("pando_mount_table_age_seconds",
		"Age of the mount table the agent holds.", nil, nil)
	descTokenLeft = prometheus.NewDesc("pando_token_expiry_seconds",
		"Seconds until the soonest expiry of the access tokens the agent holds (negative once expired): how long it can work without a controller.", nil, nil)
)

// collectController exposes what the agent knows of its controller.
func collectController(s client.ControllerStatus, gauge, counter func(*prometheus.Desc, float64, ...string)) {
	now := time.Now()
	if s.State != "unknown" {
		up := 0.0
		if s.State == "up" {
			up = 1
		}
		gauge(descCtrlUp, up)
		gauge(descCtrlState, now.Sub(s.Since).Seconds())
	}
	counter(descCtrlErrors, float64(s.Errors))
	if !s.MountTableAt.IsZero() {
		gauge(descMountAge, now.Sub(s.MountTableAt).Seconds())
	}
	if s.Tokens > 0 {
		gauge(descTokenLeft, s.TokenExpires.Sub(now).Seconds())
	}
}
