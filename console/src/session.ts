// The bearer token of the session. Kept in sessionStorage only: it goes
// with the tab, never into localStorage (which outlives it) or a URL (which
// history and logs keep).

const KEY = "informerhub.token";

export function getToken(): string {
  return sessionStorage.getItem(KEY) ?? "";
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
}
