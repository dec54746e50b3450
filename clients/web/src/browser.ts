// The entry of dist/informerhub-web.js: the package as one script for pages
// without a bundler, exposed as window.informerhubWeb.

import * as informerhubWeb from "./index.js";

declare global {
  interface Window {
    informerhubWeb: typeof informerhubWeb;
  }
}

window.informerhubWeb = informerhubWeb;
