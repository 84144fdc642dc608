import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// base "./": dist/ is served from wherever the test's static server puts it.
export default defineConfig({ base: "./", plugins: [react()], build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 2000 } });
