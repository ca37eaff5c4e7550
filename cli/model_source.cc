// Models named on the command line of `blz inspect` and `blz diff`: a local path, or a registry
// reference fetched with the client code of `blz pull` (cli/model_source.h).
#include "cli/model_source.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "client/auth.h"
#include "client/local_ref.h"
#include "client/local_store.h"
#include "client/manifest.h"
#include "client/pull.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "core/bytes.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"

namespace blz::cli {
namespace {

constexpr int kTimeoutSeconds = 60;
// The first read of an archive: its fixed prefix and, usually, its whole JSON header.
constexpr uint64_t kFirstRead = 256 * 1024;

uint64_t LoadLE64At(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + size_t(i)]);
  return v;
}

// GET bytes [begin, end) of blob `digest` of `ref`'s repository (Range; a registry that answers
// 200 with the whole blob is cut to the range, up to the in-memory cap).
Result<std::string> GetBlobRange(const client::Reference& ref, const std::string& digest,
                                 const client::HttpClientOptions& http, const std::string& token,
                                 uint64_t begin, uint64_t end) {
  client::HttpClientOptions options = http;
  options.tls = ref.registry.tls;
  client::HttpClient connection(ref.registry.host, ref.registry.port, options);
  client::HttpRequest req;
  req.target = "/v2/" + ref.name + "/blobs/" + digest;
  req.headers.push_back({"Range", "bytes=" + std::to_string(begin) + "-" +
                                      std::to_string(end - 1)});
  if (!token.empty()) req.headers.push_back({"Authorization", "Bearer " + token});
  client::TransferOptions transfer;
  transfer.max_memory_body = (end - begin) + 1024;
  const std::string what = "blob " + digest + " bytes " + std::to_string(begin) + "-" +
                           std::to_string(end - 1);
  BLZ_ASSIGN_OR_RETURN(client::HttpResponse r,
                       client::SendGetFollowingRedirects(&connection, ref.registry, req, options,
                                                         transfer));
  if (r.status == 206) {
    if (r.body.size() != end - begin) {
      return Corruption("inspect " + ref.ToString() + ": " + what + ": got " +
                        std::to_string(r.body.size()) + " bytes");
    }
    return std::move(r.body);
  }
  if (r.status != 200) {
    return client::StatusFromResponse(r, "inspect", what, !token.empty(),
                                      ref.registry.ToString());
  }
  if (r.body.size() < end) {
    return Corruption("inspect " + ref.ToString() + ": " + what + ": the blob is only " +
                      std::to_string(r.body.size()) + " bytes");
  }
  return r.body.substr(begin, end - begin);
}

}  // namespace

void AddModelSourceOptions(CLI::App* sub, ModelSourceArgs* args) {
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_option("--cache", args->cache,
                  "local store for registry references (default $BLZ_CACHE_DIR, "
                  "$XDG_CACHE_HOME/blz, ~/.cache/blz)");
}

bool IsModelReference(const std::string& text, const RegistryConnectionArgs& conn) {
  if (PathExists(text)) return false;
  if (!ResolveReference(text, conn).ok()) return false;
  // "dir/missing.safetensors" parses as NAME on $BLZ_REGISTRY: only a text with a scheme, a
  // registry host, a tag or a digest is taken as a reference.
  return text.find("://") != std::string::npos || client::ParseReference(text).ok() ||
         text.find(':') != std::string::npos || text.find('@') != std::string::npos;
}

Result<std::string> PullModelSource(const std::string& text, const ModelSourceArgs& args,
                                    client::ProgressMode progress) {
  const bool offline = client::OfflineFromEnv();
  BLZ_ASSIGN_OR_RETURN(client::Reference ref,
                       ResolveLocalReference(text, args.conn, args.cache, offline,
                                             kTimeoutSeconds));
  client::PullOptions options;
  options.cache_dir = args.cache;
  options.offline = offline;
  options.progress = progress;
  BLZ_ASSIGN_OR_RETURN(options.http, HttpOptionsFor(args.conn, kTimeoutSeconds, ref.registry));
  BLZ_ASSIGN_OR_RETURN(client::PullResult r, client::Pull(ref.ToUrl(), options));
  for (const std::string& note : r.notes) Note(note);
  (void)AutoPruneAfterPull(args.cache, r.digest, r.patch_from);
  if (!r.cache_hit) {
    std::fprintf(stderr, "pulled %s (%s, downloaded %s of %s)\n", Esc(r.reference).c_str(),
                 Esc(r.digest).c_str(), client::FormatBytes(r.bytes_downloaded).c_str(),
                 client::FormatBytes(r.full_bytes).c_str());
  }
  return r.archive_path;
}

Result<std::string> FetchArchiveHeaders(const std::string& text, const ModelSourceArgs& args,
                                        ScopedTempDir* tmp, std::string* archive_digest) {
  BLZ_ASSIGN_OR_RETURN(client::Reference ref, ResolveReference(text, args.conn));
  client::RegistryClientOptions client_options;
  BLZ_ASSIGN_OR_RETURN(client_options.http,
                       HttpOptionsFor(args.conn, kTimeoutSeconds, ref.registry));
  BLZ_ASSIGN_OR_RETURN(client_options.token,
                       client::TokenFor(std::nullopt, ref.registry.ToString()));
  client::RegistryClient registry(ref.registry, client_options);
  std::string manifest_digest;
  BLZ_ASSIGN_OR_RETURN(const client::ModelManifest manifest,
                       client::FetchPullManifest(&registry, ref, client::RetryPolicy{}, nullptr,
                                                 "inspect", &manifest_digest));
  *archive_digest = manifest.archive_digest;

  // Held locally already: that archive (its data is not read).
  BLZ_ASSIGN_OR_RETURN(std::string store_dir, client::LocalStore::ResolveDir(args.cache));
  if (std::error_code ec; std::filesystem::is_directory(store_dir, ec)) {
    BLZ_ASSIGN_OR_RETURN(client::LocalStore store, client::LocalStore::Open(store_dir));
    if (store.HasBlob(manifest.archive_digest)) return store.BlobPath(manifest.archive_digest);
  }

  // Else a sparse copy: the archive's prefix (magic, JSON header) and the stored header of
  // each safetensors / GGUF file, at their offsets; every tensor byte is a hole.
  const uint64_t size = manifest.archive_size;
  const std::string& token = client_options.token;
  const std::string& digest = manifest.archive_digest;
  const std::string what = "inspect " + ref.ToString() + ": archive " + digest;
  if (size < 24) return Corruption(what + ": only " + std::to_string(size) + " bytes");
  BLZ_ASSIGN_OR_RETURN(std::string prefix,
                       GetBlobRange(ref, digest, client_options.http, token, 0,
                                    std::min(size, kFirstRead)));
  const uint64_t header_len = LoadLE64At(prefix, 16);
  if (header_len > formats::kMaxArchiveHeaderBytes || 24 + header_len > size) {
    return Corruption(what + ": header length " + std::to_string(header_len) +
                      " at byte 16 is out of range");
  }
  const uint64_t data_start =
      std::min(size, (24 + header_len + formats::kArchiveAlignment - 1) /
                         formats::kArchiveAlignment * formats::kArchiveAlignment);
  if (data_start > prefix.size()) {
    BLZ_ASSIGN_OR_RETURN(std::string rest,
                         GetBlobRange(ref, digest, client_options.http, token, prefix.size(),
                                      data_start));
    prefix += rest;
  }
  BLZ_ASSIGN_OR_RETURN(formats::ArchiveHeader header,
                       formats::ParseArchivePrefix(AsBytes(prefix), size));
  BLZ_RETURN_IF_ERROR(tmp->CreateNear(
      (std::filesystem::temp_directory_path() / "blz-inspect").string()));
  const std::string path = tmp->path() + "/" + digest.substr(7) + ".blz";
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path));
  BLZ_RETURN_IF_ERROR(out.WriteAt(0, AsBytes(prefix)));
  for (const formats::ArchiveFile& f : header.files) {
    if ((f.kind != "safetensors" && f.kind != "gguf") || f.pieces.empty()) continue;
    const formats::ArchiveRaw& raw = header.raws[f.pieces[0].index];
    const uint64_t begin = header.data_start + raw.offset;
    if (raw.length == 0) continue;
    // A file's stored header piece (safetensors JSON, GGUF metadata) is small; a larger one
    // from a hostile registry must not size an in-memory read.
    if (raw.length > formats::kMaxArchiveHeaderBytes) {
      return Corruption(what + ": file '" + f.path + "': its header piece of " +
                        std::to_string(raw.length) + " bytes is over the " +
                        std::to_string(formats::kMaxArchiveHeaderBytes) + "-byte cap");
    }
    BLZ_ASSIGN_OR_RETURN(std::string bytes,
                         GetBlobRange(ref, digest, client_options.http, token, begin,
                                      begin + raw.length));
    BLZ_RETURN_IF_ERROR(out.WriteAt(begin, AsBytes(bytes)));
  }
  BLZ_RETURN_IF_ERROR(out.Truncate(size));
  BLZ_RETURN_IF_ERROR(out.Commit());
  return path;
}

}  // namespace blz::cli
