package gateway

import (
	"context"
	"fmt"

	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/wire"
)

// GatewayAdder makes the credentials of a new gateway: an
// administrator's client does.
type GatewayAdder interface {
	GatewayAdd(ctx context.Context, name string) (wire.UserAddResp, error)
}

// Credentials returns the credentials of the gateway name kept in the
// file bundle, which pando up's gateways run with. At first use (no
// bundle to read) they are made with the administrator's client cl and
// kept there. The controller's addresses returned are admin's, which may
// differ from those of when they were made.
func Credentials(ctx context.Context, cl GatewayAdder, admin *config.Config, bundle, name string) (*config.Config, error) {
	creds, err := config.Load(bundle)
	if err != nil {
		resp, err := cl.GatewayAdd(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("making the gateway's credentials (kept in %s, which is missing): %w", bundle, err)
		}
		creds = &config.Config{Domain: admin.Domain, Controller: admin.Controller, Controllers: admin.Controllers, User: name, CA: string(resp.CA), Cert: string(resp.Cert), Key: string(resp.Key)}
		if err := creds.Save(bundle); err != nil {
			return nil, err
		}
	}
	creds.Controller, creds.Controllers = admin.Controller, admin.Controllers
	return creds, nil
}
