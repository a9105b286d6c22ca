//! The Vulkan instance: loading the loader, the Khronos validation layer with synchronization
//! validation, and the debug-utils messenger that records every warning and error.
//!
//! Validation is how the CI machine (lavapipe, which executes in order and hides missing
//! barriers) catches the hazards a real GPU would turn into corrupt data, so every message of
//! severity warning or error is kept in a [`ValidationLog`] that tests assert is empty.

use std::collections::HashSet;
use std::ffi::{CStr, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use ash::vk;
use ash::vk::Handle;
use tensormem_contract::{Error, Result};

use crate::error::{BACKEND, vk_err};

/// Name of the Khronos validation layer.
pub(crate) const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Every validation warning and error seen since the backend was created, in order. Shared with
/// the messenger, so a handle taken from [`crate::VulkanBackend::validation_log`] also sees the
/// messages of the backend's destruction (leaked objects, for instance).
///
/// One message is not recorded: `VUID-vkCmdCopyBuffer-pRegions-00117` (source and destination
/// overlap in memory) on a sparse buffer of this backend. The layer (1.3.239, Debian bookworm)
/// compares whole sparse bindings rather than the bytes a copy touches, so it reports a copy
/// between two halves of one granule; the ranges' disjointness is the validating front's check
/// (`Error::Overlap`), and each granule has memory of its own, so distinct offsets never alias.
#[derive(Debug, Default)]
pub struct ValidationLog {
    messages: Mutex<Vec<String>>,
    /// Raw handles of the live sparse buffers (see above).
    sparse_buffers: Mutex<HashSet<u64>>,
}

/// The message the layer emits for sparse buffers that do not overlap (see [`ValidationLog`]).
const SPARSE_COPY_FALSE_POSITIVE: &CStr = c"VUID-vkCmdCopyBuffer-pRegions-00117";

impl ValidationLog {
    /// Notes that `buffer` is a live sparse buffer (`live`), or no longer (destroyed).
    pub(crate) fn note_sparse_buffer(&self, buffer: vk::Buffer, live: bool) {
        let mut set = self
            .sparse_buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if live {
            set.insert(buffer.as_raw());
        } else {
            set.remove(&buffer.as_raw());
        }
    }

    /// Whether the message `id` about `objects` is the layer's false positive on sparse
    /// buffers.
    fn is_sparse_false_positive(
        &self,
        id: &CStr,
        objects: &[vk::DebugUtilsObjectNameInfoEXT<'_>],
    ) -> bool {
        let set = self
            .sparse_buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        id == SPARSE_COPY_FALSE_POSITIVE
            && !objects.is_empty()
            && objects
                .iter()
                .all(|o| o.object_type == vk::ObjectType::BUFFER && set.contains(&o.object_handle))
    }

    fn push(&self, message: String) {
        self.messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }

    /// A copy of the messages recorded so far.
    pub fn messages(&self) -> Vec<String> {
        self.messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The Vulkan loader (`libvulkan.so.1`), loaded once per process and never unloaded (see
/// [`keep_driver_loaded`]: the loader must outlive the instance that holds the driver).
///
/// # Errors
/// [`Error::BackendUnavailable`] when the library is missing (remembered: a loader installed
/// later is seen by the next process).
pub(crate) fn load_entry() -> Result<ash::Entry> {
    static ENTRY: OnceLock<std::result::Result<ash::Entry, String>> = OnceLock::new();
    ENTRY
        .get_or_init(|| {
            // SAFETY: `Entry::load` dlopens the system Vulkan loader; the loader's initialisation
            // has no preconditions beyond being the real loader, which the default search finds.
            unsafe { ash::Entry::load() }.map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| Error::BackendUnavailable {
            backend: BACKEND,
            reason: format!("the Vulkan loader could not be loaded ({e}); install libvulkan1"),
        })
}

/// Keeps the drivers loaded for the rest of the process with one bare instance that is never
/// destroyed. The loader loads the drivers with an instance and unloads them when the last
/// instance goes, so a process that creates backends one after another reloads the driver each
/// time; NVIDIA's R580 driver refused every instance after its 28th reload in one process
/// (`VK_ERROR_INCOMPATIBLE_DRIVER`; the same 238 conformance cases all pass with the driver kept
/// loaded). The instance has no layers, extensions or devices; failing to create it is left to
/// the backend's own instance to report.
pub(crate) fn keep_driver_loaded(entry: &ash::Entry) {
    static ANCHOR: OnceLock<Option<ash::Instance>> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        let app = vk::ApplicationInfo::default()
            .application_name(c"tensormem (driver anchor)")
            .api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `info` outlives the call; the instance is never destroyed (its purpose), so no
        // child object can outlive it.
        unsafe { entry.create_instance(&info, None) }.ok()
    });
}

/// Whether the Khronos validation layer is installed (Debian package `vulkan-validationlayers`).
pub(crate) fn validation_layer_present(entry: &ash::Entry) -> bool {
    // SAFETY: enumerating instance layers has no preconditions.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
    layers
        .iter()
        .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER))
}

/// An instance this backend created, with its messenger when validation is on.
pub(crate) struct OwnedInstance {
    pub instance: ash::Instance,
    pub messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// The callback's user data; freed after the messenger and the instance are destroyed.
    pub log_ptr: Option<*const ValidationLog>,
}

// SAFETY: `log_ptr` is the pointer of an `Arc<ValidationLog>` (a `Sync` type) owned by this
// struct; it is only dereferenced by the messenger callback and released in `destroy`.
unsafe impl Send for OwnedInstance {}
// SAFETY: as above; `&OwnedInstance` gives no access to the pointee except through `Sync` types.
unsafe impl Sync for OwnedInstance {}

impl OwnedInstance {
    /// Destroys the messenger, then the instance, then releases the log reference.
    ///
    /// # Safety
    /// Every object created from the instance (the device included) must already be destroyed,
    /// and `destroy` is called once.
    pub(crate) unsafe fn destroy(&mut self) {
        if let Some((loader, messenger)) = self.messenger.take() {
            // SAFETY: the messenger was created from this instance and is destroyed once.
            unsafe { loader.destroy_debug_utils_messenger(messenger, None) };
        }
        // SAFETY: the caller guarantees all children are destroyed.
        unsafe { self.instance.destroy_instance(None) };
        if let Some(ptr) = self.log_ptr.take() {
            // SAFETY: `ptr` came from `Arc::into_raw` in `create_instance` and nothing uses it
            // after the messenger and the instance (whose pNext messenger also used it) are gone.
            drop(unsafe { Arc::from_raw(ptr) });
        }
    }
}

/// Records validation messages of severity warning and error into the `ValidationLog` passed as
/// user data.
unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if user.is_null() || data.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the layer passes a valid callback-data struct for the duration of the call.
    let data = unsafe { &*data };
    let message = if data.p_message.is_null() {
        String::from("(no message)")
    } else {
        // SAFETY: `p_message` is a NUL-terminated string owned by the layer during the call.
        unsafe { CStr::from_ptr(data.p_message) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: `user` is the `Arc<ValidationLog>` pointer installed by `create_instance`, alive
    // until after the messenger is destroyed.
    let log = unsafe { &*(user as *const ValidationLog) };
    let objects = if data.p_objects.is_null() || data.object_count == 0 {
        &[][..]
    } else {
        // SAFETY: the layer passes `object_count` valid object infos during the call.
        unsafe { std::slice::from_raw_parts(data.p_objects, data.object_count as usize) }
    };
    if !data.p_message_id_name.is_null() {
        // SAFETY: a NUL-terminated string owned by the layer during the call.
        let id = unsafe { CStr::from_ptr(data.p_message_id_name) };
        if log.is_sparse_false_positive(id, objects) {
            return vk::FALSE;
        }
    }
    log.push(format!("[{severity:?} {types:?}] {message}"));
    vk::FALSE
}

/// The messenger description: warnings and errors of every type, into `user_data`.
fn messenger_create_info(user_data: *mut c_void) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(debug_callback))
        .user_data(user_data)
}

/// Creates a Vulkan 1.2 instance; with `validation`, also enables the Khronos layer with
/// synchronization validation and a messenger writing into `log`.
///
/// # Errors
/// [`Error::BackendUnavailable`] when no driver is installed (`VK_ERROR_INCOMPATIBLE_DRIVER`) or
/// when validation is requested but the layer is missing; [`Error::Backend`] otherwise.
pub(crate) fn create_instance(
    entry: &ash::Entry,
    validation: Option<Arc<ValidationLog>>,
) -> Result<OwnedInstance> {
    let app = vk::ApplicationInfo::default()
        .application_name(c"tensormem")
        .engine_name(c"tensormem")
        .api_version(vk::API_VERSION_1_2);
    let mut layers = Vec::new();
    let mut extensions = Vec::new();
    if validation.is_some() {
        if !validation_layer_present(entry) {
            return Err(Error::BackendUnavailable {
                backend: BACKEND,
                reason: "validation was requested but VK_LAYER_KHRONOS_validation is not \
                         installed (Debian package vulkan-validationlayers)"
                    .into(),
            });
        }
        layers.push(VALIDATION_LAYER.as_ptr());
        extensions.push(ash::ext::debug_utils::NAME.as_ptr());
        extensions.push(ash::ext::validation_features::NAME.as_ptr());
    }
    let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
    let mut features = vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
    let log_ptr = validation.map(Arc::into_raw);
    let user_data = log_ptr.map_or(std::ptr::null_mut(), |p| p as *mut c_void);
    let mut messenger_info = messenger_create_info(user_data);
    let mut info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&extensions);
    if log_ptr.is_some() {
        info = info.push_next(&mut features).push_next(&mut messenger_info);
    }
    let release_log = |log_ptr: Option<*const ValidationLog>| {
        if let Some(ptr) = log_ptr {
            // SAFETY: `ptr` came from `Arc::into_raw` above and no Vulkan object uses it.
            drop(unsafe { Arc::from_raw(ptr) });
        }
    };
    // SAFETY: `info` and everything it points to outlive the call.
    let instance = match unsafe { entry.create_instance(&info, None) } {
        Ok(i) => i,
        Err(vk::Result::ERROR_INCOMPATIBLE_DRIVER) => {
            release_log(log_ptr);
            return Err(Error::BackendUnavailable {
                backend: BACKEND,
                reason: "no Vulkan driver (ICD) is installed; install mesa-vulkan-drivers for \
                         lavapipe or a GPU driver"
                    .into(),
            });
        }
        Err(e) => {
            release_log(log_ptr);
            return Err(vk_err("vkCreateInstance")(e));
        }
    };
    let mut owned = OwnedInstance {
        instance,
        messenger: None,
        log_ptr,
    };
    if log_ptr.is_some() {
        let loader = ash::ext::debug_utils::Instance::new(entry, &owned.instance);
        let standalone = messenger_create_info(user_data);
        // SAFETY: the create info is valid and its user data outlives the messenger.
        match unsafe { loader.create_debug_utils_messenger(&standalone, None) } {
            Ok(m) => owned.messenger = Some((loader, m)),
            Err(e) => {
                // SAFETY: nothing else was created from the instance yet.
                unsafe { owned.destroy() };
                return Err(vk_err("vkCreateDebugUtilsMessengerEXT")(e));
            }
        }
    }
    Ok(owned)
}
