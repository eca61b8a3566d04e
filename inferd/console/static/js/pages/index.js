// The console's pages, in nav order. A page is one module whose default export is
// { id, title, needs?, mount(root) -> { submit?, stop?, unmount?, new?, focus? } }; adding a page is adding a line.
// `needs`: a catalog key of /ai/v1/models ("speakers"); the nav shows the page only when it lists a model.
import chat from "./chat.js";
import embeddings from "./embeddings.js";
import rerank from "./rerank.js";
import chunking from "./chunking.js";
import extract from "./extract.js";
import rewrite from "./rewrite.js";
import read from "./read.js";
import transcribe from "./transcribe.js";
import speak from "./speak.js";
import tabular from "./tabular.js";
import files from "./files.js";
import models from "./models.js";
import operator from "./operator.js";

export const PAGES = [chat, embeddings, rerank, chunking, extract, rewrite, read, transcribe, speak, tabular, files, models, operator];
