package controller

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"pando.dev/pando/internal/metricsrv"
)

var (
	descCtrlLive = prometheus.NewDesc("pando_controller_live",
		"1 for each controller of the domain that recorded a heartbeat in the last 15 s, 0 for one that has not.", []string{"controller"}, nil)
	descStoreUp = prometheus.NewDesc("pando_store_member_up",
		"1 for each member of the store's cluster that answers this controller, 0 for one that does not (one embedded member for bbolt).", []string{"member"}, nil)
	descStoreLeader = prometheus.NewDesc("pando_store_member_leader",
		"1 for the member of the store's cluster that leads.", []string{"member"}, nil)
	descShareOnline = prometheus.NewDesc("pando_share_online",
		"1 for each registered share that watches a controller of the domain, 0 for one that does not.", []string{"share"}, nil)
)

// collector exposes what pando status shows, from this controller.
type collector struct{ c *Controller }

func (m collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCtrlLive, descStoreUp, descStoreLeader, descShareOnline} {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := m.c.health(ctx)
	if err != nil {
		return
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, c := range st.Controllers {
		ch <- prometheus.MustNewConstMetric(descCtrlLive, prometheus.GaugeValue, b(c.Live), c.Addr)
	}
	if st.StoreKind == "bbolt" {
		ch <- prometheus.MustNewConstMetric(descStoreUp, prometheus.GaugeValue, 1, "bbolt")
		ch <- prometheus.MustNewConstMetric(descStoreLeader, prometheus.GaugeValue, 1, "bbolt")
	}
	for _, s := range st.Store {
		ch <- prometheus.MustNewConstMetric(descStoreUp, prometheus.GaugeValue, b(s.Up), s.Name)
		ch <- prometheus.MustNewConstMetric(descStoreLeader, prometheus.GaugeValue, b(s.Leader), s.Name)
	}
	for _, s := range st.Shares {
		ch <- prometheus.MustNewConstMetric(descShareOnline, prometheus.GaugeValue, b(s.Online), s.Name)
	}
}

// ServeMetrics serves /metrics on addr until the controller closes.
func (c *Controller) ServeMetrics(addr string) (net.Addr, error) {
	srv, err := metricsrv.Serve(addr, metricsrv.Handler(collector{c}))
	if err != nil {
		return nil, err
	}
	go func() {
		<-c.done
		srv.Close()
	}()
	return srv.Addr(), nil
}
