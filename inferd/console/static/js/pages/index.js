// The console's pages, in nav order. A page is one module whose default export is
// { id, title, mount(root) -> { submit?, stop?, unmount? } }; adding a page is adding a line.
import chat from "./chat.js";
import embeddings from "./embeddings.js";
import rerank from "./rerank.js";
import chunking from "./chunking.js";
import tabular from "./tabular.js";
import models from "./models.js";

export const PAGES = [chat, embeddings, rerank, chunking, tabular, models];
