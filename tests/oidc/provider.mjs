// The OpenID provider of the dashboard's single sign-on tests
// (tests/it/sso.rs, started by tests/it/support/oidc_provider.rs): npm's
// oidc-provider (a certified implementation, pinned in package.json and
// installed by scripts/install-deps into tests/oidc/node_modules) on a
// free loopback port, with its own login and consent pages, one RS256
// key, the users below and five confidential clients sharing one secret
// and the redirect URIs given:
//   cronlease            as the provider issues its ID tokens;
//   cronlease-wrong-aud  its ID tokens re-signed with another audience;
//   cronlease-expired    its ID tokens re-signed as expired an hour ago;
//   cronlease-tampered   its ID tokens' groups changed, signature kept;
//   cronlease-mixup      its authorization answers naming another issuer
//                        (`iss`, RFC 9207), as a mix-up attack's would.
// Usage: node provider.mjs SECRET REDIRECT_BASE... (each base gets
// /sso/callback and /login registered). Prints `issuer URL` once it
// listens; stops when its standard input closes.

import crypto from "node:crypto";
import http from "node:http";
import Provider from "oidc-provider";

const [secret, ...bases] = process.argv.slice(2);
if (!secret || bases.length === 0) {
  console.error("usage: node provider.mjs SECRET REDIRECT_BASE...");
  process.exit(2);
}

const USERS = {
  alice: { email: "alice@example.com", groups: ["staff", "cron-operators"] },
  victor: { email: "victor@example.com", groups: ["cron-viewers"] },
  nora: { email: "nora@example.com", groups: ["staff"] },
};

const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: "jwk" }), kid: "test-rs256", alg: "RS256", use: "sig" };

/// The issuer the mix-up client's answers name instead of this one.
const OTHER_ISSUER = "http://127.0.0.1:9/another-provider";

const MUTATIONS = {
  "cronlease-wrong-aud": (payload) => {
    payload.aud = "another-app";
    delete payload.azp;
    return "sign";
  },
  "cronlease-expired": (payload) => {
    const now = Math.floor(Date.now() / 1000);
    payload.iat = now - 7200;
    payload.exp = now - 3600;
    return "sign";
  },
  "cronlease-tampered": (payload) => {
    payload.groups = ["cron-admins"];
    return "keep";
  },
};

function b64(data) {
  return Buffer.from(data).toString("base64url");
}

/// The ID token `token` with its payload changed by `mutate`: signed
/// again with the provider's key, or with its old signature kept.
function mutated(token, mutate) {
  const [header, body, signature] = token.split(".");
  const payload = JSON.parse(Buffer.from(body, "base64url").toString());
  const how = mutate(payload);
  const input = `${header}.${b64(JSON.stringify(payload))}`;
  if (how === "keep") return `${input}.${signature}`;
  return `${input}.${b64(crypto.sign("sha256", Buffer.from(input), privateKey))}`;
}

const server = http.createServer();
server.listen(0, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const client = (client_id) => ({
    client_id,
    client_secret: secret,
    redirect_uris: bases.map((b) => `${b}/sso/callback`),
    post_logout_redirect_uris: bases.map((b) => `${b}/login`),
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_basic",
  });
  const provider = new Provider(issuer, {
    clients: ["cronlease", "cronlease-mixup", ...Object.keys(MUTATIONS)].map(client),
    jwks: { keys: [jwk] },
    cookies: { keys: [crypto.randomBytes(32).toString("hex")] },
    claims: { openid: ["sub"], email: ["email", "email_verified"], groups: ["groups"] },
    // The scopes' claims in the ID token itself (the dashboard reads no
    // userinfo).
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    async findAccount(ctx, id) {
      const user = USERS[id];
      if (!user) return undefined;
      return {
        accountId: id,
        async claims() {
          return { sub: id, email: user.email, email_verified: true, groups: user.groups };
        },
      };
    },
  });
  provider.use(async (ctx, next) => {
    await next();
    const clientId = ctx.oidc?.client?.clientId;
    const mutate = MUTATIONS[clientId];
    if (ctx.path === "/token" && mutate && ctx.body && typeof ctx.body.id_token === "string") {
      ctx.body = { ...ctx.body, id_token: mutated(ctx.body.id_token, mutate) };
    }
  });
  provider.use(async (ctx, next) => {
    await next();
    const location = ctx.response.get("location");
    if (ctx.oidc?.client?.clientId === "cronlease-mixup" && location.includes("/sso/callback?")) {
      const answer = new URL(location);
      if (answer.searchParams.has("iss")) {
        answer.searchParams.set("iss", OTHER_ISSUER);
        ctx.set("location", answer.href);
      }
    }
  });
  server.on("request", provider.callback());
  console.log(`issuer ${issuer}`);
});

process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
process.stdin.on("close", () => process.exit(0));
